/* shunt-plan: inspect and check execution plans.
 *   shunt-plan list DIR         the plan table a communicator would load
 *   shunt-plan show FILE        one plan, per rank
 *   shunt-plan check FILE...    static checks and race checks; exit 1 when any fails
 *   shunt-plan verify FILE|DIR...  run it on the host backend (or the GPU kernel built for the CPU) and check
 *                               the results */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

struct command {
  const char* name;
  const char* args;
  const char* help;
  int (*run)(int argc, char** argv);
};

static const struct command commands[] = {
    {"list", "[--tuning FILE] [--max-threadblocks N] [--tsv] DIR",
     "list the plans of a folder: ranges, status or rejection reason (--tsv: tab-separated, for programs)",
     cmd_list},
    {"show", "FILE", "print one plan per rank: buffers, channels, threadblocks and ops", cmd_show},
    {"check", "[--max-threadblocks N] FILE...", "run the static and race checks; exit 1 when any plan fails",
     cmd_check},
    {"verify",
     "FILE... [--ranks N] [--sizes S,..] [--dtype T,..|all] [--op O,..|all] [--iters K] "
     "[--inplace|--outofplace] [--backend host|kernel-cpu] [--threads T,..]",
     "run the plan on the host backend (or the GPU kernel compiled for the CPU) and compare every output "
     "byte with the reference collective",
     cmd_verify},
};

static int usage(FILE* f) {
  fprintf(f, "usage: shunt-plan COMMAND ARGS\n");
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    fprintf(f, "  %-6s %s\n         %s\n", commands[i].name, commands[i].args, commands[i].help);
  return f == stderr ? 2 : 0;
}

int take_max_threadblocks(int* argc, char** argv, uint32_t* out) {
  *out = 0;
  for (int i = 0; i < *argc; i++) {
    if (strcmp(argv[i], "--max-threadblocks") != 0) continue;
    if (i + 1 >= *argc) return -1;
    char* end;
    unsigned long v = strtoul(argv[i + 1], &end, 10);
    if (*end || end == argv[i + 1] || v > UINT32_MAX) return -1;
    *out = (uint32_t)v;
    memmove(&argv[i], &argv[i + 2], (size_t)(*argc - i - 2) * sizeof(*argv));
    *argc -= 2;
    i--;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0)
    return usage(stdout);
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 2, argv + 2);
  fprintf(stderr, "shunt-plan: unknown command '%s'\n", argv[1]);
  return usage(stderr);
}
