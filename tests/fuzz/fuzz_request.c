/*
 * fuzz_request.c - libFuzzer harness for smollm3d's request decoder and
 * validator: every input is a Request frame as a client would send it.  It
 * goes through smol_rpc_decode (size cap, protobuf-c unpack, version, kind,
 * session ids) and, for generate requests, smol_rpc_build_request (UTF-8,
 * roles, JSON via jansson, sampling, stops, token ids) and smol_request_free.
 * A crash, a sanitizer report or a leak is a bug; errors are expected.
 *
 * Build and run: tests/fuzz/run_request.sh [SECONDS].  The files under test
 * (rpc.c, chat_template.c, sampler.c, error.c, log.c and the generated
 * protobuf-c code) are compiled by clang with -fsanitize=fuzzer,address,undefined;
 * the rest of the library (engine, model, kernels: linked, never called)
 * comes from a plain gcc build of libsmollm3.a, because clang 14 rejects
 * the kernels' __builtin_cpu_supports("f16c").
 */
#include <stddef.h>
#include <stdint.h>

#include "daemon/server/engine.h"
#include "daemon/server/log.h"
#include "daemon/server/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) { smol_log_init("fuzz", SMOL_LOG_ERR); init = 1; }
    /* small limits so the fuzzer reaches the size cap and the context check */
    static const struct smol_rpc_limits lim = {1 << 16, 49152, 256, NULL};
    Smollm3__Request *rq = NULL;
    uint64_t id;
    char err[SMOL_ERRLEN];
    if (smol_rpc_decode(data, size, &lim, &rq, &id, err) != SMOL_OK) return 0;
    if (rq->kind_case == SMOLLM3__REQUEST__KIND_GENERATE) {
        struct smol_request *r = NULL;
        if (smol_rpc_build_request(rq->generate, id, &lim, &r, err) == SMOL_OK) {
            /* the invariants the engine relies on */
            if (r->kind == SMOL_INPUT_CHAT && (!r->chat.msgs || r->chat.n_msgs == 0)) __builtin_trap();
            if (r->kind == SMOL_INPUT_TOKENS)
                for (int i = 0; i < r->n_ids; i++)
                    if (r->ids[i] < 0 || r->ids[i] >= lim.n_vocab) __builtin_trap();
            if (r->n_stops > SMOL_MAX_STOPS || r->max_tokens < 0 || r->max_tokens > lim.n_ctx) __builtin_trap();
            smol_request_free(&r);
        }
    }
    smollm3__request__free_unpacked(rq, NULL);
    return 0;
}
