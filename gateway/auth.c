/*
 * auth.c - API keys (--api-key-file FILE): who may use the /v1/ and /ui/ paths,
 * /tokenize and /detokenize.  /health and /metrics stay open (the
 * gateway listens on a Unix socket; the shipped nginx site answers them to
 * its allow list of monitoring addresses only).
 *
 * The file: one key per line, then optionally a name (the key's label in the
 * logs; default "key<line>", [A-Za-z0-9_.-]) and `attribute=value` fields,
 * blank lines and `#` comments skipped:
 *
 *   KEY [NAME] [tenant=TENANT] [max_inflight=N] [max_tier=TIER]
 *
 * max_inflight: its streams in flight (default its share of --max-inflight,
 * max_inflight / number of live keys, so that one key cannot take another's
 * room); max_tier=priority|default|flex: the highest service tier its
 * requests get (default `default`: asking for priority gets default).
 *
 * Keys are compared in constant time: each presented key is compared with
 * every key, over a fixed width, whatever matches, so the time says nothing
 * about which key or how many bytes were right.
 *
 * The key comes as `Authorization: Bearer KEY` or, as Anthropic's clients
 * send it, `x-api-key: KEY` (the same keys; Authorization wins when both
 * are present).
 *
 * A UI stream (GET /ui/stream/SID) is authorised by its SID: the 128-bit
 * random id was handed out by an authorised POST /ui/chat, and a browser's
 * EventSource cannot send an Authorization header (a GET that presents
 * another valid key is answered as for an unknown SID; one with no key or an
 * unknown one is admitted by the SID alone: ui.c).
 *
 * Tenants: each key acts for a tenant, named to the daemon in every request
 * (GenerateRequest.tenant: sessions and the prefix cache are per tenant) and
 * used by the gateway as the owner of what a key stores (stored responses, UI
 * streams).  The tenant is the line's `tenant=` (several keys may share one:
 * a key rotated keeps its tenant's sessions), else an id derived from the key
 * under the deployment's secret (--tenant-secret-file: 64 hex digits, two
 * 128-bit SipHash-2-4 keys): 32 hex digits of the two SipHashes of the key.
 * Without the secret the id is not computable, so one who reads it in the
 * daemon's logs, its spill files or /metrics cannot test guesses of a key;
 * the same key gives another id in another deployment.  Keys without a
 * secret are refused at start (there is no default secret).  Two keys whose
 * derived ids collide are refused at load.  With no keys configured
 * everything is the default tenant "".
 *
 * Reload (SIGHUP, main.c): the file is read again; a bad file leaves the keys
 * as they were.  A key keeps its index (slot) across reloads, so whatever
 * counts by index (struct gw_req.key, gw_stream.key, responses.c's shares)
 * stays right; a revoked key's slot stays, never matches again, and what it
 * started runs to its end.  Tenant strings are interned and live until exit:
 * a stream or a stored response keeps the tenant it was made with.
 */
#include "gateway/auth.h"
#include "gateway/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define KEY_MAX 255             /* bytes of a key */
#define NAME_MAX_ 63
#define TENANT_MAX 64           /* the daemon's limit on GenerateRequest.tenant */

struct gw_key {
    char key[KEY_MAX + 1];      /* NUL-padded to the full width; zeroed when revoked */
    size_t len;
    int live;                   /* 0: revoked by a reload, never matches */
    char name[NAME_MAX_ + 1];   /* [A-Za-z0-9_.-] */
    const char *tenant;         /* interned (intern_tenant): tenant= or the derived id */
    unsigned max_inflight;      /* max_inflight=N: its streams in flight; 0 = its share of --max-inflight */
    int max_tier;               /* max_tier=: the highest service tier it gets (GW_TIER_*) */
};

static struct gw_key **keys;    /* [n_keys], slots only ever added */
static int n_keys, n_live;
static char *keys_path;         /* for gw_auth_reload */

/* The tenant strings handed out, each once, freed never: streams and stored
 * responses hold them past a reload. */
struct tenant_str {
    struct tenant_str *next;
    char id[TENANT_MAX + 1];
};
static struct tenant_str *tenants;
static int n_tenants;

/* The deployment's secret: the two SipHash keys of derived tenant ids. */
static unsigned char secret[2][16];
static int have_secret;

int gw_auth_n_keys(void) { return n_keys; }
int gw_auth_n_live(void) { return n_live; }

const char *gw_auth_key_name(int i)
{
    return i >= 0 && i < n_keys ? keys[i]->name : "";
}

const char *gw_auth_tenant(int i)
{
    return i >= 0 && i < n_keys ? keys[i]->tenant : "";
}

int gw_auth_n_tenants(void) { return n_tenants; }

const char *gw_auth_tenant_at(int i)
{
    struct tenant_str *t = tenants;
    for (int k = n_tenants - 1; t && k > i; k--) t = t->next;     /* newest first */
    return t && i >= 0 && i < n_tenants ? t->id : "";
}

static const char *intern_tenant(const char *id)
{
    for (struct tenant_str *t = tenants; t; t = t->next)
        if (!strcmp(t->id, id)) return t->id;
    struct tenant_str *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    snprintf(t->id, sizeof t->id, "%s", id);
    t->next = tenants;
    tenants = t;
    n_tenants++;
    return t->id;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int gw_auth_secret_load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        gw_log(3, "--tenant-secret-file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (!fstat(fileno(f), &st) && (st.st_mode & (S_IROTH | S_IWOTH))) {
        gw_log(3, "--tenant-secret-file %s is readable or writable by every user: chmod 0600", path);
        fclose(f);
        return -1;
    }
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    while (n && isspace((unsigned char)buf[n - 1])) n--;
    int rc = 0;
    if (n != 64) rc = -1;
    unsigned char k[32];
    for (size_t i = 0; !rc && i < 32; i++) {
        int hi = hexval(buf[2 * i]), lo = hexval(buf[2 * i + 1]);
        if (hi < 0 || lo < 0) rc = -1;
        else k[i] = (unsigned char)(hi << 4 | lo);
    }
    if (!rc) {
        memcpy(secret[0], k, 16);
        memcpy(secret[1], k + 16, 16);
        have_secret = 1;
    } else {
        gw_log(3, "--tenant-secret-file %s: expected 64 hex digits (32 random bytes: "
                  "od -An -tx1 -N32 /dev/urandom | tr -d ' \\n' > FILE)", path);
    }
    memset(buf, 0, sizeof buf);
    memset(k, 0, sizeof k);
    return rc;
}

static void derive_tenant(const char *key, size_t n, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)gw_siphash24(secret[0], key, n),
             (unsigned long long)gw_siphash24(secret[1], key, n));
}

/* ---- the key file ----------------------------------------------------------------- */

/* One line of the file, parsed. */
struct line {
    char key[KEY_MAX + 1];
    size_t len;
    char name[NAME_MAX_ + 1];
    char tenant[TENANT_MAX + 1];
    int derived;                /* tenant derived from the key, not the line's tenant= */
    unsigned max_inflight;      /* max_inflight=N, 0 if absent */
    int max_tier;               /* max_tier=, GW_TIER_DEFAULT if absent */
};

unsigned gw_auth_max_inflight(int i, unsigned total)
{
    if (i < 0 || i >= n_keys) return total;
    if (keys[i]->max_inflight) return keys[i]->max_inflight;
    const unsigned share = n_live ? total / (unsigned)n_live : total;
    return share ? share : 1;
}

int gw_auth_max_tier(int i)
{
    return i >= 0 && i < n_keys ? keys[i]->max_tier : GW_TIER_PRIORITY;
}

static int name_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i])) return 0;
    return n > 0;
}

/* KEY [NAME] [attr=value ...] [# comment] into x: 0, or -1 with why. */
static int parse_line(char *p, int ln, struct line *x, char *why, size_t why_len)
{
    memset(x, 0, sizeof *x);
    x->max_tier = GW_TIER_DEFAULT;      /* priority only where a key says so */
    char *k = p;
    while (*p && !isspace((unsigned char)*p)) p++;
    size_t klen = (size_t)(p - k);
    if (klen > KEY_MAX) {
        snprintf(why, why_len, "key over %d bytes", KEY_MAX);
        return -1;
    }
    memcpy(x->key, k, klen);
    x->len = klen;
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') break;
        char *t = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        size_t tlen = (size_t)(p - t);
        char *eq = memchr(t, '=', tlen);
        if (!eq) {                                      /* the name */
            if (x->name[0]) {
                snprintf(why, why_len, "expected 'KEY [NAME] [tenant=TENANT] [max_inflight=N] [max_tier=TIER]', a second name '%.*s'",
                         (int)(tlen > 40 ? 40 : tlen), t);
                return -1;
            }
            if (tlen > NAME_MAX_ || !name_ok(t, tlen)) {
                snprintf(why, why_len, "key names are 1 to %d of [A-Za-z0-9_.-]", NAME_MAX_);
                return -1;
            }
            memcpy(x->name, t, tlen);
            continue;
        }
        size_t alen = (size_t)(eq - t), vlen = tlen - alen - 1;
        if (alen == 6 && !memcmp(t, "tenant", 6)) {
            if (vlen > TENANT_MAX || !name_ok(eq + 1, vlen)) {
                snprintf(why, why_len, "tenant= takes 1 to %d of [A-Za-z0-9_.-]", TENANT_MAX);
                return -1;
            }
            memcpy(x->tenant, eq + 1, vlen);
            x->tenant[vlen] = 0;
        } else if (alen == 12 && !memcmp(t, "max_inflight", 12)) {
            char v[16], *end;
            unsigned long m = 0;
            if (vlen > 0 && vlen < sizeof v) {
                memcpy(v, eq + 1, vlen);
                v[vlen] = 0;
                errno = 0;
                m = strtoul(v, &end, 10);
                if (*end || errno || v[0] == '-') m = 0;
            }
            if (m < 1 || m > 1000000) {
                snprintf(why, why_len, "max_inflight must be 1..1000000");
                return -1;
            }
            x->max_inflight = (unsigned)m;
        } else if (alen == 8 && !memcmp(t, "max_tier", 8)) {
            if (vlen == 8 && !memcmp(eq + 1, "priority", 8)) x->max_tier = GW_TIER_PRIORITY;
            else if (vlen == 7 && !memcmp(eq + 1, "default", 7)) x->max_tier = GW_TIER_DEFAULT;
            else if (vlen == 4 && !memcmp(eq + 1, "flex", 4)) x->max_tier = GW_TIER_FLEX;
            else {
                snprintf(why, why_len, "max_tier must be priority, default or flex");
                return -1;
            }
        } else {
            snprintf(why, why_len, "unknown field '%.*s=' (known: tenant=, max_inflight=, max_tier=)",
                     (int)(alen > 40 ? 40 : alen), t);
            return -1;
        }
    }
    if (!x->name[0]) snprintf(x->name, sizeof x->name, "key%d", ln);
    if (!x->tenant[0]) {
        derive_tenant(x->key, x->len, x->tenant);
        x->derived = 1;
    }
    return 0;
}

/* The file's lines into *out (malloc'd, [*n]): 0, or -1 (logged, nothing kept). */
static int read_file(const char *path, struct line **out, int *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        gw_log(3, "--api-key-file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (!fstat(fileno(f), &st) && (st.st_mode & S_IROTH))
        gw_log(4, "--api-key-file %s is readable by every user: chmod o-r (0600 or 0640)", path);
    struct line *v = NULL;
    int n = 0, ln = 0, rc = 0;
    char buf[1024], why[160];
    while (fgets(buf, sizeof buf, f)) {
        ln++;
        size_t len = strlen(buf);
        if (len == sizeof buf - 1 && buf[len - 1] != '\n') {
            gw_log(3, "%s:%d: line too long", path, ln);
            rc = -1;
            break;
        }
        char *p = buf;
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        struct line *nv = realloc(v, (size_t)(n + 1) * sizeof *nv);
        if (!nv) {
            gw_log(3, "%s: out of memory", path);
            rc = -1;
            break;
        }
        v = nv;
        struct line *x = &v[n];
        if (parse_line(p, ln, x, why, sizeof why)) {
            gw_log(3, "%s:%d: %s", path, ln, why);
            rc = -1;
            break;
        }
        for (int i = 0; i < n && !rc; i++)
            if (v[i].len == x->len && !memcmp(v[i].key, x->key, x->len)) {
                gw_log(3, "%s:%d: the same key as '%s'", path, ln, v[i].name);
                rc = -1;
            } else if (x->derived && v[i].derived && !strcmp(v[i].tenant, x->tenant)) {
                gw_log(3, "%s:%d: the key's tenant id collides with '%s''s: use another key", path, ln,
                       v[i].name);
                rc = -1;
            }
        if (rc) break;
        n++;
    }
    memset(buf, 0, sizeof buf);
    fclose(f);
    if (!rc && !n) {
        gw_log(3, "--api-key-file %s holds no key", path);
        rc = -1;
    }
    if (rc && v) {
        memset(v, 0, (size_t)n * sizeof *v);
        free(v);
        v = NULL;
    }
    *out = v;
    *n_out = rc ? 0 : n;
    return rc;
}

int gw_auth_load(const char *path)
{
    if (!have_secret) {
        gw_log(3, "--api-key-file %s needs --tenant-secret-file (tenant_secret_file): tenant ids are keyed by "
                  "a per-deployment secret; make one with: od -An -tx1 -N32 /dev/urandom | tr -d ' \\n' > FILE; "
                  "chmod 0600 FILE (gateway/README.md#tenants)", path);
        return -1;
    }
    struct line *v;
    int n;
    if (read_file(path, &v, &n)) return -1;
    /* every line's slot: the key's own when it had one, else a new one; nothing is changed
     * until every allocation is made */
    int *slot = malloc((size_t)n * sizeof *slot);
    const char **tid = malloc((size_t)n * sizeof *tid);
    int n_new = 0, rc = slot && tid ? 0 : -1;
    for (int i = 0; !rc && i < n; i++) {
        slot[i] = -1;
        for (int s = 0; s < n_keys; s++)
            if (keys[s]->len == v[i].len && !memcmp(keys[s]->key, v[i].key, v[i].len)) slot[i] = s;
        if (slot[i] < 0) n_new++;
        if (!(tid[i] = intern_tenant(v[i].tenant))) rc = -1;
    }
    struct gw_key **nk = rc ? NULL : realloc(keys, (size_t)(n_keys + n_new + 1) * sizeof *nk);
    if (nk) keys = nk;
    for (int i = 0; nk && i < n; i++)
        if (slot[i] < 0) {
            struct gw_key *k = calloc(1, sizeof *k);
            if (!k) {
                rc = -1;
                break;
            }
            memcpy(k->key, v[i].key, sizeof k->key);
            k->len = v[i].len;
            slot[i] = n_keys;
            keys[n_keys++] = k;
        }
    if (!nk || rc) {
        gw_log(3, "--api-key-file %s: out of memory", path);
        rc = -1;
    } else {
        int added = n_new, revoked = 0;
        for (int s = 0; s < n_keys; s++) {
            int keep = 0;
            for (int i = 0; i < n; i++) keep |= slot[i] == s;
            if (!keep && keys[s]->live) {
                revoked++;
                keys[s]->live = 0;
                memset(keys[s]->key, 0, sizeof keys[s]->key);
                keys[s]->len = 0;
            }
        }
        for (int i = 0; i < n; i++) {
            struct gw_key *k = keys[slot[i]];
            k->live = 1;
            snprintf(k->name, sizeof k->name, "%s", v[i].name);
            k->tenant = tid[i];
            k->max_inflight = v[i].max_inflight;
            k->max_tier = v[i].max_tier;
        }
        int first = keys_path == NULL;
        if (first) keys_path = strdup(path);
        n_live = n;
        if (first) gw_log(6, "%d API key(s) from %s", n, path);
        else gw_log(6, "%d API key(s) from %s (reloaded: %d added, %d revoked)", n, path, added, revoked);
    }
    memset(v, 0, (size_t)n * sizeof *v);
    free(v);
    free(slot);
    free(tid);
    return rc;
}

int gw_auth_reload(void)
{
    if (!keys_path) {
        gw_log(6, "SIGHUP: no --api-key-file: no keys to reload");
        return 0;
    }
    if (gw_auth_load(keys_path)) {
        gw_log(3, "SIGHUP: %s not reloaded: the %d key(s) loaded before stay", keys_path, n_live);
        return -1;
    }
    return 0;
}

/* Index of the live key that matches presented[0, n), -1 if none; every key
 * is compared over the full width. */
static int match(const char *presented, size_t n)
{
    char buf[KEY_MAX + 1] = { 0 };
    unsigned long too_long = n > KEY_MAX;
    memcpy(buf, presented, too_long ? KEY_MAX : n);
    int found = -1;
    for (int i = 0; i < n_keys; i++) {
        volatile unsigned char diff = (unsigned char)(too_long | (keys[i]->len != n) | !keys[i]->live);
        for (size_t j = 0; j < sizeof buf; j++) diff |= (unsigned char)(buf[j] ^ keys[i]->key[j]);
        found = diff == 0 ? i : found;
    }
    return found;
}

int gw_auth_check(struct MHD_Connection *mc)
{
    if (!keys_path) return GW_AUTH_OPEN;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    if (h) {
        if (strncasecmp(h, "Bearer ", 7)) return GW_AUTH_NONE;
        h += 7;
    } else if (!(h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key"))) {
        return GW_AUTH_NONE;     /* Anthropic's clients send the key as x-api-key */
    }
    while (*h == ' ') h++;
    size_t n = strlen(h);
    while (n && h[n - 1] == ' ') n--;
    return match(h, n);
}
