/* The subcommands of shunt-plan. Each takes the arguments after its name and returns the
 * process exit status (0 success, 1 a plan failed, 2 usage or I/O error).
 * A new subcommand is one function here and one row in the table in main.c. */
#ifndef SHUNT_PLAN_TOOL_COMMANDS_H
#define SHUNT_PLAN_TOOL_COMMANDS_H

#include <stdint.h>

int cmd_list(int argc, char** argv);
int cmd_show(int argc, char** argv);
int cmd_check(int argc, char** argv);
int cmd_verify(int argc, char** argv);

/* Shared option: --max-threadblocks N (0 = no limit); removes it from argv. Returns -1 on a
 * bad value. */
int take_max_threadblocks(int* argc, char** argv, uint32_t* out);

#endif
