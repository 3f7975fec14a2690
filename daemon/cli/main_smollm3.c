/*
 * smollm3 - the local command-line tool: inspect a model, compute logits,
 * generate, benchmark, tokenize, render chat templates, chat.
 * Dispatches to daemon/cli/cli_<topic>.c; see cli.h for the conventions.
 */
#include "daemon/cli/cli.h"

#include <stdio.h>
#include <string.h>

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
};

static const struct command commands[] = {
    {"inspect", smol_cli_inspect, "inspect MODEL [--json]"},
    {"logits", smol_cli_logits, "logits -m MODEL --ids 1,2,3 [--all] -o OUT [--threads N]"},
    {"generate", smol_cli_generate, "generate -m MODEL (--ids 1,2,3 | --prompt TEXT) -n N [--temp T] [--seed S] [--json-schema FILE | --grammar FILE] [--json]"},
    {"bench", smol_cli_bench, "bench -m MODEL -p 512 -n 128 [-d DEPTH] [-b BATCH] [-t THREADS] [--json]"},
    {"synth", smol_cli_synth, "synth -o OUT.gguf [--preset smollm3-3b|fixture|tiny] [--type T] [--seed S]"},
    {"tokenize", smol_cli_tokenize, "tokenize -m MODEL [--special] [--json] TEXT|-"},
    {"detokenize", smol_cli_detokenize, "detokenize -m MODEL ID..."},
    {"template", smol_cli_template, "template -m MODEL --request FILE.json [--date \"DD Month YYYY\"]"},
    {"chat", smol_cli_chat, "chat -m MODEL [--no-think]"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: smollm3 COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (commands[i].fn) fprintf(f, "  smollm3 %s\n", commands[i].usage);
    fprintf(f, "\nlogits, generate and bench also take --backend cpu|cuda|cuda-emu|auto (default cpu), --cuda-device N,\n"
               "--cuda-matvec f32|q8|q8k, --cuda-fuse on|off|layer, --cuda-graphs on|off|bucket, --cuda-gemm tiled|mma|imma|lt,\n"
               "--cuda-attn paged|tiled|prefill, --cuda-persistent on|off, --cuda-gemm-fuse on|off (the CUDA backend's paths; kernels/cuda/NOTES.md)\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name) && commands[i].fn) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "smollm3: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
