/*
 * auth.c - API keys (--api-key-file FILE): who may use the /v1/ and /ui/ paths,
 * /tokenize and /detokenize.  /health and /metrics stay open (the
 * gateway listens on a Unix socket; nginx exposes /metrics to localhost
 * only).
 *
 * The file: one key per line, an optional name after whitespace (the
 * label of its counters in /metrics; default "key<line>"), then options
 * `max_inflight=N` (its streams in flight; default its share of
 * --max-inflight, max_inflight / number of keys, so that one key cannot
 * take another's room) and `max_tier=priority|default|flex` (the highest
 * service tier its requests get; default `default`: asking for priority
 * gets default), blank lines and `#` comments skipped.  Keys are compared in constant time: each presented
 * key is compared with every key, over a fixed width, whatever matches, so
 * the time says nothing about which key or how many bytes were right.
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
 * Tenants: each key is its own tenant, named to the daemon by an id derived
 * from the key (GenerateRequest.tenant: sessions and the prefix cache are
 * per tenant) and used by the gateway as the owner of what a key stores
 * (stored responses, UI streams).  The id is 32 hex digits of two SipHash-2-4
 * values of the key: the daemon, its logs and its session files never see
 * the key, and the id is the same after a restart (a session on disk stays
 * its tenant's).  Two keys whose ids collide are refused at load.  With no
 * keys configured everything is the default tenant "".
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

struct gw_key {
    char key[KEY_MAX + 1];      /* NUL-padded to the full width */
    size_t len;
    char name[NAME_MAX_ + 1];   /* [A-Za-z0-9_.-] */
    char tenant[33];            /* hex of the two SipHashes of the key (tenant_of) */
    unsigned max_inflight;      /* max_inflight=N: its streams in flight; 0 = its share of --max-inflight */
    int max_tier;               /* max_tier=: the highest service tier it gets (GW_TIER_*) */
};

static struct gw_key *keys;
static int n_keys;

int gw_auth_n_keys(void) { return n_keys; }

const char *gw_auth_key_name(int i)
{
    return i >= 0 && i < n_keys ? keys[i].name : "";
}

const char *gw_auth_tenant(int i)
{
    return i >= 0 && i < n_keys ? keys[i].tenant : "";
}

/* The two SipHash keys of a tenant id: fixed, so the id of a key stays the
 * same across restarts and gateways (a deployment's sessions outlive them). */
static const unsigned char tenant_k[2][16] = {
    { 's', 'm', 'o', 'l', 'l', 'm', '3', ' ', 't', 'e', 'n', 'a', 'n', 't', ' ', '1' },
    { 's', 'm', 'o', 'l', 'l', 'm', '3', ' ', 't', 'e', 'n', 'a', 'n', 't', ' ', '2' },
};

unsigned gw_auth_max_inflight(int i, unsigned total)
{
    if (i < 0 || i >= n_keys) return total;
    if (keys[i].max_inflight) return keys[i].max_inflight;
    const unsigned share = total / (unsigned)n_keys;
    return share ? share : 1;
}

int gw_auth_max_tier(int i)
{
    return i >= 0 && i < n_keys ? keys[i].max_tier : GW_TIER_PRIORITY;
}

/* A key line's option word[0, n) (`max_inflight=N`, `max_tier=TIER`) into
 * x: 0, or -1 (logged). */
static int key_option(struct gw_key *x, const char *word, size_t n, const char *path, int ln)
{
    char w[64];
    if (n >= sizeof w) { gw_log(3, "%s:%d: option '%.20s...' too long", path, ln, word); return -1; }
    memcpy(w, word, n);
    w[n] = 0;
    char *v = strchr(w, '=');
    *v++ = 0;
    if (!strcmp(w, "max_inflight")) {
        char *end;
        errno = 0;
        unsigned long m = strtoul(v, &end, 10);
        if (!*v || *end || errno || m < 1 || m > 1000000) {
            gw_log(3, "%s:%d: max_inflight must be 1..1000000", path, ln);
            return -1;
        }
        x->max_inflight = (unsigned)m;
        return 0;
    }
    if (!strcmp(w, "max_tier")) {
        if (!strcmp(v, "priority")) x->max_tier = GW_TIER_PRIORITY;
        else if (!strcmp(v, "default")) x->max_tier = GW_TIER_DEFAULT;
        else if (!strcmp(v, "flex")) x->max_tier = GW_TIER_FLEX;
        else { gw_log(3, "%s:%d: max_tier must be priority, default or flex", path, ln); return -1; }
        return 0;
    }
    gw_log(3, "%s:%d: unknown key option '%s' (max_inflight=N, max_tier=TIER)", path, ln, w);
    return -1;
}

static void tenant_of(const char *key, size_t n, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)gw_siphash24(tenant_k[0], key, n),
             (unsigned long long)gw_siphash24(tenant_k[1], key, n));
}

int gw_auth_load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        gw_log(3, "--api-key-file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (!fstat(fileno(f), &st) && (st.st_mode & S_IROTH))
        gw_log(4, "--api-key-file %s is readable by every user: chmod o-r (0600 or 0640)", path);
    char line[1024];
    int ln = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            gw_log(3, "%s:%d: line too long", path, ln);
            rc = -1;
            break;
        }
        char *p = line;
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        char *k = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        size_t klen = (size_t)(p - k);
        while (*p && isspace((unsigned char)*p)) p++;
        char *nm = p;
        while (*p && !isspace((unsigned char)*p) && *p != '=') p++;
        if (*p == '=') p = nm;      /* no name: options follow the key */
        size_t nlen = (size_t)(p - nm);
        while (*p && isspace((unsigned char)*p)) p++;
        struct gw_key opt = { .max_tier = GW_TIER_DEFAULT };   /* priority only where a key says so */
        while (*p && *p != '#' && !rc) {
            char *w = p;
            while (*p && !isspace((unsigned char)*p)) p++;
            if (!memchr(w, '=', (size_t)(p - w))) {
                gw_log(3, "%s:%d: expected 'KEY [NAME] [max_inflight=N] [max_tier=TIER]'", path, ln);
                rc = -1;
            } else if (key_option(&opt, w, (size_t)(p - w), path, ln)) {
                rc = -1;
            }
            while (*p && isspace((unsigned char)*p)) p++;
        }
        if (rc) break;
        if (klen > KEY_MAX || nlen > NAME_MAX_) {
            gw_log(3, "%s:%d: key over %d bytes or name over %d", path, ln, KEY_MAX, NAME_MAX_);
            rc = -1;
            break;
        }
        for (size_t i = 0; i < nlen; i++)
            if (!isalnum((unsigned char)nm[i]) && !strchr("_.-", nm[i])) {
                gw_log(3, "%s:%d: key names are [A-Za-z0-9_.-]", path, ln);
                rc = -1;
                break;
            }
        if (rc) break;
        struct gw_key *nk = realloc(keys, (size_t)(n_keys + 1) * sizeof *nk);
        if (!nk) {
            rc = -1;
            break;
        }
        keys = nk;
        struct gw_key *x = &keys[n_keys];
        memset(x, 0, sizeof *x);
        memcpy(x->key, k, klen);
        x->len = klen;
        if (nlen) memcpy(x->name, nm, nlen);
        else snprintf(x->name, sizeof x->name, "key%d", ln);
        x->max_inflight = opt.max_inflight;
        x->max_tier = opt.max_tier;
        tenant_of(x->key, klen, x->tenant);
        for (int i = 0; i < n_keys; i++)
            if (keys[i].len == klen && !memcmp(keys[i].key, x->key, klen)) {
                gw_log(3, "%s:%d: the same key as '%s'", path, ln, keys[i].name);
                rc = -1;
            } else if (!strcmp(keys[i].tenant, x->tenant)) {
                gw_log(3, "%s:%d: the key's tenant id collides with '%s''s: use another key", path, ln,
                       keys[i].name);
                rc = -1;
            }
        if (rc) break;
        n_keys++;
    }
    fclose(f);
    if (!rc && !n_keys) {
        gw_log(3, "--api-key-file %s holds no key", path);
        rc = -1;
    }
    if (!rc) gw_log(6, "%d API key(s) from %s", n_keys, path);
    return rc;
}

/* Index of the key that matches presented[0, n), -1 if none; every key is
 * compared over the full width. */
static int match(const char *presented, size_t n)
{
    char buf[KEY_MAX + 1] = { 0 };
    unsigned long too_long = n > KEY_MAX;
    memcpy(buf, presented, too_long ? KEY_MAX : n);
    int found = -1;
    for (int i = 0; i < n_keys; i++) {
        volatile unsigned char diff = (unsigned char)(too_long | (keys[i].len != n));
        for (size_t j = 0; j < sizeof buf; j++) diff |= (unsigned char)(buf[j] ^ keys[i].key[j]);
        found = diff == 0 ? i : found;
    }
    return found;
}

int gw_auth_check(struct MHD_Connection *mc)
{
    if (!n_keys) return GW_AUTH_OPEN;
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
