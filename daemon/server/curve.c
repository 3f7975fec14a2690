/*
 * curve.c - CURVE keys and the ZAP handler of the daemon's tcp:// link
 * (curve.h).  The handler is a REP socket on inproc://zeromq.zap.01 owned by
 * one thread (zguide: a socket belongs to one thread); the allowed keys are
 * that thread's alone, so a reload (SIGHUP sets a flag) needs no lock.  It
 * answers each handshake with 200 and a User-Id of "gateway" or
 * "tenant=NAME", or 400.
 */
#include "daemon/server/curve.h"
#include "daemon/model/rules.h"
#include "daemon/server/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_Z85 40              /* a key in Z85: 40 characters for 32 bytes */
#define MAX_CLIENTS 4096

struct client_key {
    uint8_t pub[32];
    char user[8 + SMOL_RULE_TENANT_MAX + 1];    /* "gateway" or "tenant=NAME" */
};

struct smol_curve {
    void *zap;                  /* REP, the handler thread's */
    pthread_t thread;
    int running;
    atomic_int reload, stop;
    char secret[KEY_Z85 + 1], public[KEY_Z85 + 1];
    char clients_path[4096];
    struct client_key *keys;    /* the handler thread's (after start) */
    size_t n_keys;
};

/* The first word of path: a Z85 key into out[41]; 0 or -1 (err). */
static int read_key(const char *path, char *out, char *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return smol_errf(err, SMOL_EIO, "curve key %s: %s", path, strerror(errno)), -1;
    char buf[128] = "";
    int ok = fscanf(f, "%127s", buf) == 1 && strlen(buf) == KEY_Z85;
    fclose(f);
    uint8_t raw[32];
    if (!ok || !zmq_z85_decode(raw, buf))
        return smol_errf(err, SMOL_EINVAL, "curve key %s: expected 40 Z85 characters", path), -1;
    memcpy(out, buf, KEY_Z85 + 1);
    return 0;
}

/* The clients file into *keys; 0 or -1 (err names the line). */
static int load_clients(const char *path, struct client_key **keys, size_t *n, char *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return smol_errf(err, SMOL_EIO, "curve_clients_file %s: %s", path, strerror(errno)), -1;
    struct client_key *k = calloc(MAX_CLIENTS, sizeof *k);
    size_t nk = 0;
    char line[512];
    int ln = 0, bad = !k;
    if (!k) smol_errf(err, SMOL_ENOMEM, "out of memory");
    while (!bad && fgets(line, sizeof line, f)) {
        ln++;
        char key[64] = "", role[128] = "", extra[8] = "";
        const char *p = line + strspn(line, " \t");
        if (*p == '#') continue;        /* a comment line ('#' is a Z85 character: not after a key) */
        int nw = sscanf(line, "%63s %127s %7s", key, role, extra);
        if (nw <= 0) continue;
        struct client_key *c = &k[nk];
        if (nw != 2 || strlen(key) != KEY_Z85 || !zmq_z85_decode(c->pub, key)) {
            bad = 1;
            smol_errf(err, SMOL_EINVAL, "%s:%d: expected PUBLIC_KEY gateway|tenant=NAME", path, ln);
        } else if (!strcmp(role, "gateway")) {
            snprintf(c->user, sizeof c->user, "gateway");
        } else if (!strncmp(role, "tenant=", 7) && !smol_rule_tenant(role + 7, "tenant", err)) {
            snprintf(c->user, sizeof c->user, "%s", role);
        } else {
            bad = 1;
            smol_errf(err, SMOL_EINVAL, "%s:%d: expected gateway or tenant=NAME, got '%.64s'", path, ln, role);
        }
        if (!bad && ++nk == MAX_CLIENTS) {
            bad = 1;
            smol_errf(err, SMOL_EINVAL, "%s: more than %d clients", path, MAX_CLIENTS);
        }
    }
    fclose(f);
    if (bad) {
        free(k);
        return -1;
    }
    *keys = k;
    *n = nk;
    return 0;
}

/* One ZAP request answered (RFC 27): 200 + User-Id for a listed key, else 400. */
static void zap_answer(struct smol_curve *c)
{
    zmq_msg_t f[8];
    int n = 0, more = 1;
    while (more && n < 8) {
        zmq_msg_init(&f[n]);
        if (zmq_msg_recv(&f[n], c->zap, 0) < 0) { zmq_msg_close(&f[n]); break; }
        more = zmq_msg_more(&f[n]);
        n++;
    }
    while (more) {              /* more frames than a request has: drained */
        zmq_msg_t t;
        zmq_msg_init(&t);
        if (zmq_msg_recv(&t, c->zap, 0) < 0) { zmq_msg_close(&t); break; }
        more = zmq_msg_more(&t);
        zmq_msg_close(&t);
    }
    const char *user = NULL;
    if (n >= 7 && zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
        zmq_msg_size(&f[6]) == 32)
        for (size_t i = 0; i < c->n_keys && !user; i++)
            if (!memcmp(c->keys[i].pub, zmq_msg_data(&f[6]), 32)) user = c->keys[i].user;
    if (!user && n >= 7) {
        char z[KEY_Z85 + 1] = "?";
        if (zmq_msg_size(&f[6]) == 32) zmq_z85_encode(z, zmq_msg_data(&f[6]), 32);
        smol_log_warn("curve: a client with key %s is not in curve_clients_file: refused", z);
    }
    const char *rid = n >= 2 ? zmq_msg_data(&f[1]) : "";
    size_t rid_len = n >= 2 ? zmq_msg_size(&f[1]) : 0;
    zmq_send(c->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(c->zap, rid, rid_len, ZMQ_SNDMORE);
    zmq_send(c->zap, user ? "200" : "400", 3, ZMQ_SNDMORE);
    zmq_send(c->zap, user ? "OK" : "unknown key", user ? 2 : 11, ZMQ_SNDMORE);
    zmq_send(c->zap, user ? user : "", user ? strlen(user) : 0, ZMQ_SNDMORE);
    zmq_send(c->zap, "", 0, 0);
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
    struct smol_curve *c = arg;
    while (!atomic_load(&c->stop)) {
        if (atomic_exchange(&c->reload, 0)) {
            char err[SMOL_ERRLEN];
            struct client_key *k;
            size_t n;
            if (load_clients(c->clients_path, &k, &n, err)) {
                smol_log_err("curve: SIGHUP: %s: keeping the %zu clients loaded before", err, c->n_keys);
            } else {
                free(c->keys);
                c->keys = k;
                c->n_keys = n;
                smol_log_notice("curve: SIGHUP: %zu clients allowed", n);
            }
        }
        zmq_pollitem_t it = {.socket = c->zap, .events = ZMQ_POLLIN};
        int rc = zmq_poll(&it, 1, 200);
        if (rc < 0 && zmq_errno() == ETERM) break;
        if (rc > 0) zap_answer(c);
    }
    return NULL;
}

enum smol_err smol_curve_new(struct smol_curve **out, void *zctx, const char *secret_key_file,
                             const char *clients_file, char *err)
{
    *out = NULL;
    if (!zmq_has("curve")) return smol_errf(err, SMOL_EUNSUPPORTED, "this libzmq has no CURVE");
    if (!clients_file || !*clients_file)
        return smol_errf(err, SMOL_EINVAL, "curve_secret_key_file needs curve_clients_file (the keys allowed)");
    struct smol_curve *c = calloc(1, sizeof *c);
    if (!c) return smol_errf(err, SMOL_ENOMEM, "out of memory");
    snprintf(c->clients_path, sizeof c->clients_path, "%s", clients_file);
    enum smol_err e = SMOL_EIO;
    if (read_key(secret_key_file, c->secret, err) || load_clients(clients_file, &c->keys, &c->n_keys, err)) {
        e = SMOL_EINVAL;
        goto fail;
    }
    if (zmq_curve_public(c->public, c->secret)) {
        smol_errf(err, SMOL_EINVAL, "curve key %s: not a secret key", secret_key_file);
        goto fail;
    }
    int lg = 0;
    if (!(c->zap = zmq_socket(zctx, ZMQ_REP)) || zmq_setsockopt(c->zap, ZMQ_LINGER, &lg, sizeof lg) ||
        zmq_bind(c->zap, "inproc://zeromq.zap.01")) {
        smol_errf(err, SMOL_EIO, "curve: the ZAP handler: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (pthread_create(&c->thread, NULL, zap_main, c)) {
        smol_errf(err, SMOL_EIO, "curve: cannot start the ZAP thread");
        goto fail;
    }
    c->running = 1;
    *out = c;
    return SMOL_OK;
fail:
    smol_curve_free(&c);
    return e;
}

enum smol_err smol_curve_apply(struct smol_curve *c, void *router, char *err)
{
    int one = 1;
    if (zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one) ||
        zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, c->secret, KEY_Z85) ||
        zmq_setsockopt(router, ZMQ_ZAP_DOMAIN, "smollm3d", 8))
        return smol_errf(err, SMOL_EIO, "curve: zmq_setsockopt: %s", zmq_strerror(zmq_errno()));
    return SMOL_OK;
}

const char *smol_curve_public(const struct smol_curve *c) { return c->public; }

void smol_curve_reload(struct smol_curve *c)
{
    if (c) atomic_store(&c->reload, 1);
}

void smol_curve_free(struct smol_curve **cp)
{
    if (!cp || !*cp) return;
    struct smol_curve *c = *cp;
    if (c->running) {
        atomic_store(&c->stop, 1);
        pthread_join(c->thread, NULL);
    }
    if (c->zap) zmq_close(c->zap);
    free(c->keys);
    free(c);
    *cp = NULL;
}

const char *smol_curve_tenant_of(zmq_msg_t *m)
{
    const char *u = zmq_msg_gets(m, "User-Id");
    return u && !strncmp(u, "tenant=", 7) ? u + 7 : NULL;
}
