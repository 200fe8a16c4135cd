/* The plan parser: top level, GPUs, channels, remote buffers, semaphores, threadblocks.
 * Ops are in parse_op.c; derived fields in resolve.c. */
#include "plan/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/json.h"
#include "plan/parse_internal.h"

uint64_t shunt_fnv64(uint64_t h, const void* data, size_t len) {
  const unsigned char* p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

bool parse_chan_type(struct jctx* c, const cJSON* obj, const char* key, bool allow_none, bool allow_switch,
                     enum shunt_chan_type* out) {
  const cJSON* v = jget(c, obj, key, cJSON_String, true);
  if (!v) return false;
  const char* s = v->valuestring;
  if (strcmp(s, "memory") == 0)
    *out = SHUNT_CHAN_MEMORY;
  else if (strcmp(s, "port") == 0)
    *out = SHUNT_CHAN_PORT;
  else if (allow_switch && strcmp(s, "switch") == 0)
    *out = SHUNT_CHAN_SWITCH;
  else if (allow_none && strcmp(s, "none") == 0)
    *out = SHUNT_CHAN_NONE;
  else {
    jfail(c, key, "unknown channel type '%.64s' (expected memory, port%s%s)", s,
          allow_switch ? ", switch" : "", allow_none ? ", none" : "");
    return false;
  }
  return true;
}

bool parse_buf_type(struct jctx* c, const cJSON* v, const char* key, enum shunt_buf_type* out) {
  const char* s = v->valuestring;
  if (strcmp(s, "i") == 0)
    *out = SHUNT_BUF_INPUT;
  else if (strcmp(s, "o") == 0)
    *out = SHUNT_BUF_OUTPUT;
  else if (strcmp(s, "s") == 0)
    *out = SHUNT_BUF_SCRATCH;
  else {
    jfail(c, key, "unknown buffer type '%.64s' (expected i, o or s)", s);
    return false;
  }
  return true;
}

/* Appends the channels of one `channels` declaration to the per-type lists. The lists were
 * sized by a first pass (count_channels). */
static bool parse_gpu_channel(struct jctx* c, const cJSON* ch, uint32_t decl, struct shunt_plan_gpu* g) {
  static const char* const known[] = {"channel_type", "connected_to", "buffer_type", "rank_groups", NULL};
  if (!jkeys(c, ch, known)) return false;
  enum shunt_chan_type t;
  if (!parse_chan_type(c, ch, "channel_type", false, true, &t)) return false;
  if (t != SHUNT_CHAN_SWITCH) {
    uint32_t n, *peers;
    if (!jkey_u32_array(c, ch, "connected_to", true, &n, &peers)) return false;
    for (uint32_t i = 0; i < n; i++) {
      struct shunt_plan_channel* x = &g->channels[t][g->nchannels[t]++];
      x->type = t;
      x->peer = (int32_t)peers[i];
      x->decl_index = decl;
      x->elem_index = i;
    }
    return true;
  }
  const cJSON* bt = jget(c, ch, "buffer_type", cJSON_String, false);
  if (!bt) {
    if (!c->failed)
      jfail(c, "buffer_type", "missing required key%s",
            cJSON_GetObjectItemCaseSensitive(ch, "buff") ? " (the stale key 'buff' is not accepted)" : "");
    return false;
  }
  enum shunt_buf_type btype;
  if (!parse_buf_type(c, bt, "buffer_type", &btype)) return false;
  const cJSON* groups = jget(c, ch, "rank_groups", cJSON_Array, true);
  if (!groups) return false;
  size_t m = jpush_key(c, "rank_groups");
  uint32_t i = 0;
  for (const cJSON* gr = groups->child; gr && !c->failed; gr = gr->next, i++) {
    size_t m2 = jpush_index(c, i);
    static const char* const gknown[] = {"size", "ranks", NULL};
    if (!cJSON_IsObject(gr)) jfail(c, NULL, "expected an object");
    if (!c->failed && jkeys(c, gr, gknown)) {
      struct shunt_plan_channel* x = &g->channels[t][g->nchannels[t]++];
      x->type = t;
      x->peer = -1;
      x->buffer_type = btype;
      x->decl_index = decl;
      x->elem_index = i;
      uint32_t nr, *ranks;
      if (jkey_u32(c, gr, "size", false, 0, &x->group_size) &&
          jkey_u32_array(c, gr, "ranks", true, &nr, &ranks)) {
        x->nranks = nr;
        x->ranks = (int32_t*)ranks; /* values are below 2^31 */
      }
    }
    jpop(c, m2);
  }
  jpop(c, m);
  return !c->failed;
}

/* First pass over a GPU's `channels`: how many channels of each type. */
static bool count_channels(struct jctx* c, const cJSON* chans, uint32_t counts[SHUNT_CHAN_TYPES]) {
  uint32_t i = 0;
  for (const cJSON* ch = chans->child; ch; ch = ch->next, i++) {
    if (!cJSON_IsObject(ch)) {
      size_t m = jpush_index(c, i);
      jfail(c, NULL, "expected an object");
      jpop(c, m);
      return false;
    }
    const cJSON* t = cJSON_GetObjectItemCaseSensitive(ch, "channel_type");
    const cJSON* list = NULL;
    unsigned slot = SHUNT_CHAN_NONE;
    if (cJSON_IsString(t)) {
      if (strcmp(t->valuestring, "memory") == 0) slot = SHUNT_CHAN_MEMORY;
      if (strcmp(t->valuestring, "port") == 0) slot = SHUNT_CHAN_PORT;
      if (strcmp(t->valuestring, "switch") == 0) slot = SHUNT_CHAN_SWITCH;
      list = cJSON_GetObjectItemCaseSensitive(ch, slot == SHUNT_CHAN_SWITCH ? "rank_groups" : "connected_to");
    }
    /* Errors in the entry itself are reported by parse_gpu_channel. */
    uint32_t n = cJSON_IsArray(list) ? jcount(list) : 0;
    if (counts[slot] > UINT32_MAX - n) n = 0;
    counts[slot] += n;
  }
  return true;
}

static bool parse_remote_buffer(struct jctx* c, const cJSON* rb, struct shunt_plan_remote_buffer* x) {
  static const char* const known[] = {"rank", "type", "access_channel_types", NULL};
  if (!jkeys(c, rb, known)) return false;
  if (!jkey_i32(c, rb, "rank", true, 0, &x->rank)) return false;
  if (x->rank < 0) {
    jfail(c, "rank", "negative rank %d", x->rank);
    return false;
  }
  const cJSON* t = jget(c, rb, "type", cJSON_String, true);
  if (!t || !parse_buf_type(c, t, "type", &x->type)) return false;
  const cJSON* acc = jget(c, rb, "access_channel_types", cJSON_Array, true);
  if (!acc) return false;
  size_t m = jpush_key(c, "access_channel_types");
  uint32_t i = 0;
  for (const cJSON* a = acc->child; a && !c->failed; a = a->next, i++) {
    size_t m2 = jpush_index(c, i);
    if (!cJSON_IsString(a))
      jfail(c, NULL, "expected a string");
    else if (strcmp(a->valuestring, "memory") == 0)
      x->access |= 1u << SHUNT_CHAN_MEMORY;
    else if (strcmp(a->valuestring, "port") == 0)
      x->access |= 1u << SHUNT_CHAN_PORT;
    else
      jfail(c, NULL, "unknown access channel type '%.64s' (expected memory or port)", a->valuestring);
    jpop(c, m2);
  }
  jpop(c, m);
  return !c->failed;
}

/* Growable id list; several entries of one type concatenate into one table. Grown by
 * doubling outside the arena so that many small entries stay linear. */
struct idlist {
  uint32_t* v;
  uint32_t n, cap;
};

static bool idlist_add(struct idlist* l, const uint32_t* ids, uint32_t n) {
  if (n == 0) return true;
  if (l->n + (uint64_t)n > l->cap) {
    uint64_t cap = l->cap ? l->cap : 16;
    while (cap < l->n + (uint64_t)n) cap *= 2;
    if (cap > UINT32_MAX) return false;
    uint32_t* v = realloc(l->v, cap * sizeof(*v));
    if (!v) return false;
    l->v = v;
    l->cap = (uint32_t)cap;
  }
  memcpy(l->v + l->n, ids, n * sizeof(*ids));
  l->n += n;
  return true;
}

static bool parse_tb_tables(struct jctx* c, const cJSON* tb, struct shunt_plan_threadblock* t) {
  for (int pass = 0; pass < 2 && !c->failed; pass++) {
    const char* key = pass ? "remote_buffer_refs" : "channels";
    const char* tkey = pass ? "access_channel_type" : "channel_type";
    const char* ikey = pass ? "remote_buffer_ids" : "channel_ids";
    struct shunt_plan_table* tables = pass ? t->remote_refs : t->channels;
    const cJSON* arr = jget(c, tb, key, cJSON_Array, pass == 0);
    if (!arr) continue;
    struct idlist lists[SHUNT_CHAN_TYPES] = {{0}};
    size_t m = jpush_key(c, key);
    uint32_t i = 0;
    for (const cJSON* e = arr->child; e && !c->failed; e = e->next, i++) {
      size_t m2 = jpush_index(c, i);
      /* "buff" is a legacy key of threadblock channel entries that the format tolerates. */
      static const char* const ck[] = {"channel_type", "channel_ids", "buff", NULL};
      static const char* const rk[] = {"access_channel_type", "remote_buffer_ids", NULL};
      enum shunt_chan_type ct;
      uint32_t n, *ids;
      if (!cJSON_IsObject(e))
        jfail(c, NULL, "expected an object");
      else if (jkeys(c, e, pass ? rk : ck) && parse_chan_type(c, e, tkey, false, pass == 0, &ct) &&
               jkey_u32_array(c, e, ikey, true, &n, &ids) && !idlist_add(&lists[ct], ids, n))
        jfail(c, NULL, "out of memory");
      jpop(c, m2);
    }
    jpop(c, m);
    for (int k = 0; k < SHUNT_CHAN_TYPES; k++) {
      if (!c->failed && lists[k].n) {
        tables[k].ids = shunt_arena_calloc(c->arena, lists[k].n, sizeof(uint32_t));
        if (!tables[k].ids)
          jfail(c, key, "out of memory");
        else {
          memcpy(tables[k].ids, lists[k].v, lists[k].n * sizeof(uint32_t));
          tables[k].n = lists[k].n;
        }
      }
      free(lists[k].v);
    }
  }
  return !c->failed;
}

static bool parse_threadblock(struct jctx* c, const cJSON* tb, struct shunt_plan_threadblock* t) {
  static const char* const known[] = {"id", "ops", "channels", "remote_buffer_refs", NULL};
  if (!jkeys(c, tb, known)) return false;
  if (!jkey_u32(c, tb, "id", true, 0, &t->id)) return false;
  if (!parse_tb_tables(c, tb, t)) return false;
  const cJSON* ops = jget(c, tb, "ops", cJSON_Array, true);
  if (!ops) return false;
  size_t m = jpush_key(c, "ops");
  parse_op_list(c, ops, false, &t->nops, &t->ops);
  jpop(c, m);
  if (c->failed) return false;
  uint64_t flat = t->nops;
  for (uint32_t i = 0; i < t->nops; i++) flat += t->ops[i].nops;
  t->nops_flat = flat > UINT32_MAX ? UINT32_MAX : (uint32_t)flat;
  return true;
}

static bool parse_gpu(struct jctx* c, const cJSON* gj, struct shunt_plan_gpu* g) {
  static const char* const known[] = {"id",
                                      "input_chunks",
                                      "output_chunks",
                                      "scratch_chunks",
                                      "threadblocks",
                                      "channels",
                                      "remote_buffers",
                                      "semaphores",
                                      NULL};
  if (!jkeys(c, gj, known)) return false;
  if (!jkey_i32(c, gj, "id", true, 0, &g->id) ||
      !jkey_u32(c, gj, "input_chunks", true, 0, &g->input_chunks) ||
      !jkey_u32(c, gj, "output_chunks", true, 0, &g->output_chunks) ||
      !jkey_u32(c, gj, "scratch_chunks", true, 0, &g->scratch_chunks))
    return false;

  const cJSON* chans = jget(c, gj, "channels", cJSON_Array, true);
  if (!chans) return false;
  size_t m = jpush_key(c, "channels");
  uint32_t counts[SHUNT_CHAN_TYPES] = {0};
  if (count_channels(c, chans, counts)) {
    for (int t = 0; t < SHUNT_CHAN_TYPES && !c->failed; t++) {
      g->channels[t] = shunt_arena_calloc(c->arena, counts[t], sizeof(struct shunt_plan_channel));
      if (!g->channels[t]) jfail(c, NULL, "out of memory");
    }
    uint32_t i = 0;
    for (const cJSON* ch = chans->child; ch && !c->failed; ch = ch->next, i++) {
      size_t m2 = jpush_index(c, i);
      parse_gpu_channel(c, ch, i, g);
      jpop(c, m2);
    }
  }
  jpop(c, m);
  if (c->failed) return false;

  const cJSON* rbs = jget(c, gj, "remote_buffers", cJSON_Array, true);
  if (!rbs) return false;
  g->nremote_buffers = jcount(rbs);
  g->remote_buffers = shunt_arena_calloc(c->arena, g->nremote_buffers, sizeof(*g->remote_buffers));
  if (!g->remote_buffers) jfail(c, "remote_buffers", "out of memory");
  m = jpush_key(c, "remote_buffers");
  uint32_t i = 0;
  for (const cJSON* rb = rbs->child; rb && !c->failed; rb = rb->next, i++) {
    size_t m2 = jpush_index(c, i);
    if (!cJSON_IsObject(rb))
      jfail(c, NULL, "expected an object");
    else
      parse_remote_buffer(c, rb, &g->remote_buffers[i]);
    jpop(c, m2);
  }
  jpop(c, m);
  if (c->failed) return false;

  const cJSON* sems = jget(c, gj, "semaphores", cJSON_Array, false);
  if (c->failed) return false;
  g->nsemaphores = jcount(sems);
  g->semaphores = shunt_arena_calloc(c->arena, g->nsemaphores, sizeof(*g->semaphores));
  if (!g->semaphores) jfail(c, "semaphores", "out of memory");
  m = jpush_key(c, "semaphores");
  i = 0;
  for (const cJSON* s = sems ? sems->child : NULL; s && !c->failed; s = s->next, i++) {
    size_t m2 = jpush_index(c, i);
    static const char* const sk[] = {"init_value", NULL};
    if (!cJSON_IsObject(s))
      jfail(c, NULL, "expected an object");
    else if (jkeys(c, s, sk))
      jkey_i32(c, s, "init_value", true, 0, &g->semaphores[i]);
    jpop(c, m2);
  }
  jpop(c, m);
  if (c->failed) return false;

  const cJSON* tbs = jget(c, gj, "threadblocks", cJSON_Array, true);
  if (!tbs) return false;
  g->has_threadblocks = true;
  g->nthreadblocks = jcount(tbs);
  g->threadblocks = shunt_arena_calloc(c->arena, g->nthreadblocks, sizeof(*g->threadblocks));
  if (!g->threadblocks) jfail(c, "threadblocks", "out of memory");
  m = jpush_key(c, "threadblocks");
  i = 0;
  for (const cJSON* tb = tbs->child; tb && !c->failed; tb = tb->next, i++) {
    size_t m2 = jpush_index(c, i);
    if (!cJSON_IsObject(tb))
      jfail(c, NULL, "expected an object");
    else
      parse_threadblock(c, tb, &g->threadblocks[i]);
    jpop(c, m2);
  }
  jpop(c, m);
  return !c->failed;
}

static bool parse_top(struct jctx* c, const cJSON* root, struct shunt_plan* p) {
  static const char* const known[] = {"name",
                                      "collective",
                                      "protocol",
                                      "inplace",
                                      "reuse_resources",
                                      "gpus",
                                      "num_threads_per_block",
                                      "use_double_scratch_buffer",
                                      "buffer_alignment",
                                      "min_message_size",
                                      "max_message_size",
                                      "root",
                                      NULL};
  if (!cJSON_IsObject(root)) {
    jfail(c, NULL, "the top level is not a JSON object");
    return false;
  }
  /* Legacy plans lack current keys; look for legacy GPU keys first for a clear message. */
  const cJSON* gpus_any = cJSON_GetObjectItemCaseSensitive(root, "gpus");
  if (cJSON_IsArray(gpus_any) && cJSON_IsObject(gpus_any->child)) {
    size_t m = jpush_key(c, "gpus");
    size_t m2 = jpush_index(c, 0);
    const cJSON* g0 = gpus_any->child;
    for (const cJSON* k = g0->child; k; k = k->next)
      if (k->string && (strcmp(k->string, "inputChunks") == 0 || strcmp(k->string, "chunkGroups") == 0)) {
        jfail(c, NULL,
              "legacy MSCCL++ plan format (v0.7 or older; key '%s'): not supported, regenerate the plan with "
              "MSCCL++ v0.8 or newer",
              k->string);
        break;
      }
    jpop(c, m2);
    jpop(c, m);
    if (c->failed) return false;
  }
  if (!jkeys(c, root, known)) return false;
  if (!jkey_str(c, root, "name", true, &p->name) || !jkey_str(c, root, "collective", true, &p->collective) ||
      !jkey_str(c, root, "protocol", true, &p->protocol) ||
      !jkey_bool(c, root, "inplace", true, false, &p->inplace) ||
      !jkey_bool(c, root, "reuse_resources", false, false, &p->reuse_resources) ||
      !jkey_u32(c, root, "num_threads_per_block", false, 1024, &p->num_threads_per_block) ||
      !jkey_bool(c, root, "use_double_scratch_buffer", false, false, &p->use_double_scratch_buffer) ||
      !jkey_u32(c, root, "buffer_alignment", false, 16, &p->buffer_alignment) ||
      !jkey_u64(c, root, "min_message_size", false, 0, &p->min_message_size) ||
      !jkey_u64(c, root, "max_message_size", false, UINT64_MAX, &p->max_message_size) ||
      !jkey_u32(c, root, "root", false, 0, &p->root))
    return false;
  p->coll = shunt_coll_of_name(p->collective);
  p->ll = strcmp(p->protocol, "LL") == 0;
  const cJSON* gpus = jget(c, root, "gpus", cJSON_Array, true);
  if (!gpus) return false;
  p->ngpus = jcount(gpus);
  p->gpus = shunt_arena_calloc(c->arena, p->ngpus, sizeof(*p->gpus));
  if (!p->gpus) jfail(c, "gpus", "out of memory");
  size_t m = jpush_key(c, "gpus");
  uint32_t i = 0;
  for (const cJSON* g = gpus->child; g && !c->failed; g = g->next, i++) {
    size_t m2 = jpush_index(c, i);
    if (!cJSON_IsObject(g))
      jfail(c, NULL, "expected an object");
    else
      parse_gpu(c, g, &p->gpus[i]);
    jpop(c, m2);
  }
  jpop(c, m);
  return !c->failed;
}

static bool only_space(const char* s, const char* end) {
  for (; s < end; s++)
    if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return false;
  return true;
}

struct shunt_plan* shunt_plan_parse(const char* text, size_t len, const char* file,
                                    struct shunt_plan_errors* errs) {
  struct jctx c = {.file = file ? file : "(plan)", .errs = errs, .text = text, .len = len};
  if (len == 0 || only_space(text, text + len)) {
    shunt_plan_error_add(errs, c.file, "", "empty file");
    return NULL;
  }
  if (len > SHUNT_PLAN_MAX_FILE_BYTES) {
    shunt_plan_error_add(errs, c.file, "", "file too large (%zu bytes; the limit is %zu)", len,
                         SHUNT_PLAN_MAX_FILE_BYTES);
    return NULL;
  }
  const char* end = NULL;
  cJSON* root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root || (end && !only_space(end, text + len))) {
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    size_t line = 1;
    for (size_t i = 0; i < at; i++) line += text[i] == '\n';
    shunt_plan_error_add(
        errs, c.file, "",
        root ? "invalid JSON: unexpected content after the top-level value at byte %zu (line %zu)"
             : "invalid JSON at byte %zu (line %zu): syntax error, truncated file, or nesting "
               "deeper than 1000 levels",
        at, line);
    cJSON_Delete(root);
    return NULL;
  }
  c.len = end ? (size_t)(end - text) : len;
  struct shunt_arena* arena = shunt_arena_new();
  struct shunt_plan* p = arena ? shunt_arena_calloc(arena, 1, sizeof(*p)) : NULL;
  if (!p) {
    shunt_plan_error_add(errs, c.file, "", "out of memory");
    shunt_arena_free(arena);
    cJSON_Delete(root);
    return NULL;
  }
  c.arena = arena;
  p->arena_ = arena;
  p->file = shunt_arena_strdup(arena, c.file);
  p->content_hash = shunt_fnv64(SHUNT_FNV64_INIT, text, len);
  if (p->file && jctx_index_numbers(&c, root)) {
    parse_top(&c, root, p);
    if (!c.failed) resolve_plan(&c, p);
  } else if (!p->file) {
    jfail(&c, NULL, "out of memory");
  }
  free(c.num_off);
  cJSON_Delete(root);
  if (c.failed) {
    shunt_plan_free(p);
    return NULL;
  }
  return p;
}

char* shunt_plan_read_file(const char* path, size_t* len, struct shunt_plan_errors* errs) {
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    shunt_plan_error_add(errs, path, "", "cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    shunt_plan_error_add(errs, path, "", "not a regular file");
    close(fd);
    return NULL;
  }
  if ((uint64_t)st.st_size > SHUNT_PLAN_MAX_FILE_BYTES) {
    shunt_plan_error_add(errs, path, "", "file too large (%lld bytes; the limit is %zu)",
                         (long long)st.st_size, SHUNT_PLAN_MAX_FILE_BYTES);
    close(fd);
    return NULL;
  }
  size_t size = (size_t)st.st_size;
  char* buf = malloc(size + 1);
  if (!buf) {
    shunt_plan_error_add(errs, path, "", "out of memory reading %zu bytes", size);
    close(fd);
    return NULL;
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = read(fd, buf + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  *len = got;
  return buf;
}

struct shunt_plan* shunt_plan_load_file(const char* path, struct shunt_plan_errors* errs) {
  size_t got;
  char* buf = shunt_plan_read_file(path, &got, errs);
  if (!buf) return NULL;
  struct shunt_plan* p = shunt_plan_parse(buf, got, path, errs);
  free(buf);
  return p;
}
