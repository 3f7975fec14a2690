/*
 * cli.h - subcommands of the local tool build/bin/smollm3.
 *
 * Each subcommand is a function taking the arguments after its name
 * (argv[0] is the subcommand name) and returning the process exit code:
 * 0 on success, 1 on a runtime error (bad model, bad input), 2 on a usage
 * error.  Errors go to stderr as "smollm3 <cmd>: <message>".  Names, flags
 * and output formats are a contract checked from outside: see daemon/cli/README.md.
 */
#ifndef SMOL_CLI_H
#define SMOL_CLI_H

#include <stdio.h>

int smol_cli_inspect(int argc, char **argv);    /* cli_inspect.c */
int smol_cli_logits(int argc, char **argv);     /* cli_model.c */
int smol_cli_generate(int argc, char **argv);   /* cli_model.c */
int smol_cli_bench(int argc, char **argv);      /* cli_model.c */
int smol_cli_synth(int argc, char **argv);      /* cli_synth.c */
int smol_cli_tokenize(int argc, char **argv);   /* cli_text.c */
int smol_cli_detokenize(int argc, char **argv); /* cli_text.c */
int smol_cli_template(int argc, char **argv);   /* cli_template.c */
int smol_cli_chat(int argc, char **argv);       /* cli_chat.c */

/* Shared helpers (cli_util.c). */
/* Parses "1,2,3" into a malloc'd array; 0 on success, -1 with a message on stderr. */
int smol_cli_parse_ids(const char *cmd, const char *s, int **ids, int *n);
/* Strict integer / float parsing of a flag value; -1 and a message on bad input. */
int smol_cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
int smol_cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);

/* All of f (to its end) in a malloc'd buffer, *len bytes (not terminated); NULL on a read
 * error or out of memory. */
char *smol_cli_read_all(FILE *f, size_t *len);

#endif
