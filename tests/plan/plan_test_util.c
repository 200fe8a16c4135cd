#include "plan_test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* gpu_fmt =
    "{\"id\": %d, \"input_chunks\": 2, \"output_chunks\": 2, \"scratch_chunks\": 1,"
    " \"channels\": [{\"channel_type\": \"memory\", \"connected_to\": [%d]}],"
    " \"remote_buffers\": [{\"rank\": %d, \"type\": \"s\", \"access_channel_types\": [\"memory\"]}],"
    " \"semaphores\": [{\"init_value\": 0}],"
    " \"threadblocks\": ["
    "  {\"id\": 0, \"channels\": [{\"channel_type\": \"memory\", \"channel_ids\": [0]}],"
    "   \"remote_buffer_refs\": [{\"access_channel_type\": \"memory\", \"remote_buffer_ids\": [0]}],"
    "   \"ops\": ["
    "    {\"name\": \"put\", \"src_buff\": [{\"type\": \"i\", \"index\": %d, \"size\": 1}],"
    "     \"dst_buff\": [{\"buffer_id\": 0, \"index\": 0, \"size\": 1}], \"channel_type\": \"memory\"},"
    "    {\"name\": \"nop\"},"
    "    {\"name\": \"signal\", \"channel_ids\": [0], \"channel_type\": \"memory\"},"
    "    {\"name\": \"wait\", \"channel_ids\": [0], \"channel_type\": \"memory\"},"
    "    {\"name\": \"nop\"},"
    "    {\"name\": \"re\", \"src_buff\": [{\"type\": \"i\", \"index\": %d, \"size\": 1}, {\"type\": \"s\", "
    "\"index\": 0, "
    "\"size\": 1}], \"dst_buff\": [{\"type\": \"o\", \"index\": %d, \"size\": 1}]%s},"
    "    {\"name\": \"nop\"},"
    "    {\"name\": \"sem_release\", \"semaphore_ids\": [0]},"
    "    {\"name\": \"barrier\", \"barrier_id\": 0, \"num_threadblocks\": 2},"
    /* The peer's read of its scratch comes before this rank's end of the call, so the next
     * call's put cannot overwrite it mid-read (one scratch for every call). */
    "    {\"name\": \"signal\", \"channel_type\": \"memory\", \"channel_ids\": [0]},"
    "    {\"name\": \"wait\", \"channel_type\": \"memory\", \"channel_ids\": [0]}]},"
    "  {\"id\": 1, \"channels\": [], \"ops\": ["
    "    {\"name\": \"sem_acquire\", \"semaphore_ids\": [0]},"
    "    {\"name\": \"nop\"},"
    "    {\"name\": \"barrier\", \"barrier_id\": 0, \"num_threadblocks\": 2}]}]}";

char* base_plan(const struct base_opts* o) {
  struct base_opts d = {0};
  if (!o) o = &d;
  char redop[64] = "";
  if (o->reduce_op) snprintf(redop, sizeof(redop), ", \"reduce_op\": \"%s\"", o->reduce_op);
  char g[2][4096];
  for (int r = 0; r < 2; r++) snprintf(g[r], sizeof(g[r]), gpu_fmt, r, 1 - r, 1 - r, 1 - r, r, r, redop);
  char* s = malloc(10000);
  snprintf(s, 10000,
           "{\"name\": \"%s\", \"collective\": \"%s\", \"protocol\": \"Simple\", \"inplace\": %s,"
           " \"reuse_resources\": false, \"gpus\": [%s, %s], \"num_threads_per_block\": 1024,"
           " \"use_double_scratch_buffer\": false, \"buffer_alignment\": 16, \"min_message_size\": %s,"
           " \"max_message_size\": %s}",
           o->name ? o->name : "base", o->coll ? o->coll : "allreduce", o->inplace ? "true" : "false", g[0],
           g[1], o->min ? o->min : "0", o->max ? o->max : "18446744073709551615");
  return s;
}

char* edit(char* s, const char* from, const char* to, int n) {
  size_t fl = strlen(from), tl = strlen(to);
  size_t cap = strlen(s) + 1;
  int count = 0;
  for (const char* p = strstr(s, from); p; p = strstr(p + fl, from)) count++;
  if (!count || (n > 0 && n > count)) {
    fprintf(stderr, "edit: '%s' occurs %d times (wanted #%d)\n", from, count, n);
    abort();
  }
  cap += (size_t)count * (tl + 1);
  char* out = malloc(cap);
  char* w = out;
  const char* p = s;
  int k = 0;
  for (const char* q = strstr(p, from); q; q = strstr(p, from)) {
    k++;
    memcpy(w, p, (size_t)(q - p));
    w += q - p;
    if (n == 0 || k == n) {
      memcpy(w, to, tl);
      w += tl;
    } else {
      memcpy(w, from, fl);
      w += fl;
    }
    p = q + fl;
  }
  strcpy(w, p);
  free(s);
  return out;
}

char* temp_dir(void) {
  const char* t = getenv("TMPDIR");
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s/shunt-plan-test-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(buf)) {
    perror("mkdtemp");
    abort();
  }
  return strdup(buf);
}

void write_file(const char* dir, const char* name, const char* text) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE* f = fopen(path, "wb");
  if (!f) {
    perror(path);
    abort();
  }
  fwrite(text, 1, strlen(text), f);
  fclose(f);
}

void remove_tree(const char* dir) {
  char cmd[4200];
  snprintf(cmd, sizeof(cmd), "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", dir, dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}
