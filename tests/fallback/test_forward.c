/* Forwarding through libshunt to a test double of NCCL, function by function.
 *
 * Usage: test_forward MODE, with SHUNT_NCCL_LIB set by the test registration:
 *   forward  every export reaches the double with its arguments byte for byte, returns its
 *            result, and the double's own internal call stays inside it
 *   control  the double is opened before shunt, without RTLD_DEEPBIND: its internal call then
 *            lands in shunt, which shows that the forward-mode check can fail
 *   partial  a double lacking some functions: those return ncclInvalidUsage and say why
 *   missing / broken / nosyms / self   SHUNT_NCCL_LIB cannot be used: errors name the path
 *   search   no SHUNT_NCCL_LIB: the search skips shunt's own libnccl.so.2 link */
#include <dlfcn.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/pp.h"
#include "fakenccl/fake_nccl.h"
#include "fallback/nccl_funcs.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static void* fake;
static fake_last_call_fn last_call;
static fake_set_result_fn set_result;

static void open_fake(void) {
  fake = dlopen(getenv("SHUNT_NCCL_LIB"), RTLD_NOW | RTLD_NOLOAD);
  CHECK_MSG(fake != NULL, "the double should already be loaded by shunt: %s", dlerror());
  if (!fake) exit(1);
  last_call = (fake_last_call_fn)dlsym(fake, "fake_last_call");
  set_result = (fake_set_result_fn)dlsym(fake, "fake_set_result");
}

/* Fills each parameter with bytes unique to the function and the position. */
static void fill(void* p, size_t n, int fn, int pos) {
  unsigned char* b = p;
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(fn * 37 + pos * 11 + (int)i * 3 + 1);
}

static void check_arg(const char* name, const struct fake_call* c, int k, const void* p, size_t n) {
  CHECK_MSG(k < c->nargs && c->size[k] == n && memcmp(c->arg[k], p, n) == 0,
            "%s: argument %d did not arrive unchanged", name, k);
}

#define FIELD(decl) decl
#define S_DOT(a) u.s.a
/* Parameters may be const-qualified, so their bytes are written through the union. */
#define FILL(a) fill(u.raw + ((const unsigned char*)&u.s.a - u.raw), sizeof(u.s.a), fn, pos++)
#define CMP(a) check_arg(nm, c, k++, &u.s.a, sizeof(u.s.a))
#define NARGS(args) PP_NARGS(PP_UNPAREN args)

/* Declares the arguments of one function, filled with unique bytes, as `u.s`. */
#define ARGS_STRUCT(params, args)                        \
  union {                                                \
    struct {                                             \
      PP_EACH(FIELD, PP_SEMI, PP_UNPAREN params);        \
    } s;                                                 \
    unsigned char raw[256];                              \
  } u;                                                   \
  int pos = 0;                                           \
  PP_EACH(FILL, PP_SEMI, PP_UNPAREN args);               \
  (void)pos
#define CHECK_ARGS(fnm, args)                                              \
  const struct fake_call* c = last_call();                                  \
  const char* nm = #fnm;                                                   \
  CHECK_MSG(strcmp(c->name, nm) == 0, "%s reached the double as %s", nm, c->name); \
  CHECK_EQ_INT(c->nargs, NARGS(args));                                      \
  int k = 0;                                                                \
  PP_EACH(CMP, PP_SEMI, PP_UNPAREN args);                                   \
  (void)k

/* Functions without parameters (group calls, debug reset). */
#define CALL0_R(fnm) CHECK_EQ_INT(fnm(), expect_rc)
#define CALL0_V(fnm) fnm()

static int owned_without_forwarding(const char* name) {
  static const char* const skip[] = {"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankConfig", "ncclCommInitRank",
                                     "ncclCommInitRankScalable",
                                     "ncclCommInitAll", "ncclGroupStart", "ncclGroupEnd"};
  for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
    if (!strcmp(name, skip[i])) return 1;
  return 0;
}

static int fn_index;
static ncclResult_t expect_rc;

#define T_R_F(fnm, params, args)                                            \
  do {                                                                       \
    int fn = ++fn_index;                                                     \
    expect_rc = (ncclResult_t)(fn % 2 ? ncclRemoteError : ncclSuccess);      \
    set_result(expect_rc);                                                   \
    PP_CAT(T_R_CALL_, PP_BOOL(NARGS(args)))(fnm, params, args);              \
    (void)fn;                                                                \
  } while (0);
#define T_R_CALL_0(fnm, params, args)         \
  CHECK_EQ_INT(fnm(), expect_rc);             \
  CHECK_MSG(strcmp(last_call()->name, #fnm) == 0, "%s not forwarded", #fnm)
#define T_R_CALL_1(fnm, params, args)                                    \
  ARGS_STRUCT(params, args);                                              \
  ncclResult_t rc = fnm(PP_EACH(S_DOT, PP_COMMA, PP_UNPAREN args));      \
  CHECK_MSG(rc == expect_rc, "%s returned %d, the double %d", #fnm, rc, expect_rc); \
  CHECK_ARGS(fnm, args);                                                 \
  /* the profiling twin is the same implementation */                     \
  ncclResult_t prc = p##fnm(PP_EACH(S_DOT, PP_COMMA, PP_UNPAREN args));  \
  CHECK_EQ_INT(prc, expect_rc);                                           \
  CHECK_MSG(strcmp(last_call()->name, #fnm) == 0, "p%s not forwarded", #fnm)

#define T_S_F(ret, fnm, params, args, fail)                                 \
  do {                                                                       \
    int fn = ++fn_index;                                                     \
    ARGS_STRUCT(params, args);                                               \
    ret got = fnm(PP_EACH(S_DOT, PP_COMMA, PP_UNPAREN args));               \
    CHECK_ARGS(fnm, args);                                                  \
    ret (*direct)params = (ret(*) params)dlsym(fake, #fnm);                 \
    CHECK_MSG(direct != NULL, "double lacks %s", #fnm);                     \
    if (direct) {                                                            \
      ret want = direct(PP_EACH(S_DOT, PP_COMMA, PP_UNPAREN args));          \
      CHECK_MSG(memcmp(&got, &want, sizeof(ret)) == 0, "%s: result differs", #fnm); \
    }                                                                        \
    (void)fn;                                                                \
  } while (0);
#define T_V_F(fnm, params, args)                                            \
  do {                                                                       \
    ++fn_index;                                                              \
    fnm();                                                                  \
    CHECK_MSG(strcmp(last_call()->name, #fnm) == 0, "%s not forwarded", #fnm); \
  } while (0);
#define T_R_FC T_R_F
#define T_S_FC T_S_F
#define T_V_FC T_V_F
/* Functions shunt implements itself still hand a communicator it does not know to NCCL
 * untouched; those that never simply forward are checked elsewhere. */
#define T_R_O(fnm, params, args) \
  if (!owned_without_forwarding(#fnm)) T_R_F(fnm, params, args)
#define T_S_O(ret, fnm, params, args, fail)
#define T_V_O(fnm, params, args)
#define T_R(who, ...) T_R_##who(__VA_ARGS__)
#define T_S(who, ...) T_S_##who(__VA_ARGS__)
#define T_V(who, ...) T_V_##who(__VA_ARGS__)

static int mode_forward(int control) {
  if (control) {
    /* Open the double the naive way before shunt does: shunt's dlopen then returns this
     * object, whose calls of its own API bind to shunt's exports. */
    CHECK(dlopen(getenv("SHUNT_NCCL_LIB"), RTLD_NOW | RTLD_LOCAL) != NULL);
  }
  int v = 0;
  CHECK_EQ_INT(ncclGetVersion(&v), ncclSuccess);
  CHECK_EQ_INT(v, FAKE_VERSION);
  open_fake();
  fake_bcast_bound_to_self_fn bound = (fake_bcast_bound_to_self_fn)dlsym(fake, "fake_bcast_bound_to_self");
  set_result(ncclSuccess);
  int buf[4];
  fake_call_count_fn count = (fake_call_count_fn)dlsym(fake, "fake_call_count");
  long before = count();
  CHECK_EQ_INT(ncclBcast(buf, 4, ncclInt32, 0, (ncclComm_t)buf, NULL), ncclSuccess);
  CHECK_MSG(count() == before + 2, "ncclBcast should reach the double's ncclBroadcast once");
  if (control) {
    CHECK_MSG(bound() == 0, "without RTLD_DEEPBIND the double's internal call should bind to shunt");
    CHECK_DONE();
  }
#if defined(__SANITIZE_ADDRESS__)
  fprintf(stderr, "AddressSanitizer build: RTLD_DEEPBIND unavailable, internal-binding check skipped\n");
#else
  CHECK_MSG(bound() == 1, "the double's internal ncclBroadcast call came back into shunt");
#endif

  SHUNT_NCCL_CORE_FUNCS(T_R, T_S, T_V)
  SHUNT_NCCL_DEVICE_FUNCS(T_R, T_S, T_V)
  SHUNT_NCCL_INTERNAL_FUNCS(T_R, T_S, T_V)
  /* ncclResetDebugInitInternal has no pnccl twin and is declared nowhere public. */
  void (*reset_internal)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "ncclResetDebugInitInternal");
  CHECK(reset_internal != NULL);
  if (reset_internal) {
    reset_internal();
    CHECK(strcmp(last_call()->name, "ncclResetDebugInitInternal") == 0);
  }

  /* Owned calls: error strings and last error come from the double while it is there. */
  CHECK(strcmp(ncclGetErrorString(ncclInvalidUsage), "fake error string") == 0);
  set_result(ncclInternalError);
  CHECK_EQ_INT(ncclCommCount((ncclComm_t)buf, &v), ncclInternalError);
  CHECK(strcmp(ncclGetLastError(NULL), "fake last error") == 0);
  /* A newer shunt warning wins over the double's older failure. */
  CHECK_EQ_INT(ncclGetVersion(NULL), ncclInvalidArgument);
  CHECK_STR_CONTAINS(ncclGetLastError(NULL), "version argument is NULL");
  CHECK_DONE();
}

static int mode_partial(void) {
  int v = 0;
  CHECK_EQ_INT(ncclGetVersion(&v), ncclSuccess);
  open_fake();
  set_result(ncclSuccess);
  CHECK_EQ_INT(ncclCommCount((ncclComm_t)&v, &v), ncclSuccess);
  ncclComm_t newcomm = NULL;
  CHECK_EQ_INT(ncclCommShrink((ncclComm_t)&v, NULL, 0, &newcomm, NULL, 0), ncclInvalidUsage);
  CHECK_STR_CONTAINS(ncclGetLastError(NULL), "ncclCommShrink");
  CHECK_STR_CONTAINS(ncclGetLastError(NULL), "does not provide");
  ncclTeam_t t = ncclTeamWorld((ncclComm_t)&v);
  CHECK(t.nRanks == 0 && t.rank == 0 && t.stride == 0);
  CHECK_STR_CONTAINS(ncclGetLastError(NULL), "ncclTeamWorld");
  CHECK_DONE();
}

/* SHUNT_NCCL_LIB names something unusable: calls needing NCCL fail with the reason, the
 * others still answer. */
static int mode_unusable(const char* reason) {
  const char* path = getenv("SHUNT_NCCL_LIB");
  int count = 0;
  CHECK_EQ_INT(ncclCommCount((ncclComm_t)&count, &count), ncclSystemError);
  const char* err = ncclGetLastError(NULL);
  CHECK_STR_CONTAINS(err, path);
  CHECK_STR_CONTAINS(err, reason);
  int v = 0;
  CHECK_EQ_INT(ncclGetVersion(&v), ncclSuccess);
  CHECK_EQ_INT(v, NCCL_VERSION_CODE);
  CHECK(strcmp(ncclGetErrorString(ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)") ==
        0);
  CHECK(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0);
  /* shunt's own half of an id still works: communicators can stand alone on the host backend. */
  ncclUniqueId id;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  CHECK_DONE();
}

static int mode_search(void) {
  int v = 0;
  CHECK_EQ_INT(ncclGetVersion(&v), ncclSuccess);
  CHECK_MSG(v == FAKE_VERSION, "search found version %d, not the double", v);
  CHECK_DONE();
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "forward";
  /* Make sure the test really runs against shunt and not some other libnccl.so.2. */
  Dl_info info;
  CHECK(dladdr((void*)&ncclCommCount, &info) && strstr(info.dli_fname, "nccl/libnccl.so.2"));
  if (!strcmp(mode, "forward")) return mode_forward(0);
  if (!strcmp(mode, "control")) return mode_forward(1);
  if (!strcmp(mode, "partial")) return mode_partial();
  if (!strcmp(mode, "missing")) return mode_unusable("not found");
  if (!strcmp(mode, "broken")) return mode_unusable("invalid ELF header");
  if (!strcmp(mode, "nosyms")) return mode_unusable("does not define ncclGetVersion");
  if (!strcmp(mode, "self")) return mode_unusable("is shunt itself");
  if (!strcmp(mode, "search")) return mode_search();
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
