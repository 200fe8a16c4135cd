/* Preprocessor helpers for tests that walk a function's parameters generically. */
#ifndef SHUNT_TEST_PP_H
#define SHUNT_TEST_PP_H

#define PP_UNPAREN(...) __VA_ARGS__
#define PP_NARGS(...) PP_NARGS_(__VA_ARGS__ __VA_OPT__(, ) 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define PP_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, N, ...) N
#define PP_CAT(a, b) PP_CAT_(a, b)
#define PP_CAT_(a, b) a##b

/* PP_EACH(M, sep, a, b, c) -> M(a) sep M(b) sep M(c), with sep a macro producing the separator. */
#define PP_EACH(M, S, ...) PP_CAT(PP_EACH_, PP_NARGS(__VA_ARGS__))(M, S, __VA_ARGS__)
#define PP_EACH_0(M, S, ...)
#define PP_EACH_1(M, S, a) M(a)
#define PP_EACH_2(M, S, a, ...) M(a) S() PP_EACH_1(M, S, __VA_ARGS__)
#define PP_EACH_3(M, S, a, ...) M(a) S() PP_EACH_2(M, S, __VA_ARGS__)
#define PP_EACH_4(M, S, a, ...) M(a) S() PP_EACH_3(M, S, __VA_ARGS__)
#define PP_EACH_5(M, S, a, ...) M(a) S() PP_EACH_4(M, S, __VA_ARGS__)
#define PP_EACH_6(M, S, a, ...) M(a) S() PP_EACH_5(M, S, __VA_ARGS__)
#define PP_EACH_7(M, S, a, ...) M(a) S() PP_EACH_6(M, S, __VA_ARGS__)
#define PP_EACH_8(M, S, a, ...) M(a) S() PP_EACH_7(M, S, __VA_ARGS__)
#define PP_EACH_9(M, S, a, ...) M(a) S() PP_EACH_8(M, S, __VA_ARGS__)
#define PP_EACH_10(M, S, a, ...) M(a) S() PP_EACH_9(M, S, __VA_ARGS__)
#define PP_EACH_11(M, S, a, ...) M(a) S() PP_EACH_10(M, S, __VA_ARGS__)
#define PP_EACH_12(M, S, a, ...) M(a) S() PP_EACH_11(M, S, __VA_ARGS__)
/* PP_BOOL(n): 0 for 0, 1 for 1..12. */
#define PP_BOOL(n) PP_CAT(PP_BOOL_, n)
#define PP_BOOL_0 0
#define PP_BOOL_1 1
#define PP_BOOL_2 1
#define PP_BOOL_3 1
#define PP_BOOL_4 1
#define PP_BOOL_5 1
#define PP_BOOL_6 1
#define PP_BOOL_7 1
#define PP_BOOL_8 1
#define PP_BOOL_9 1
#define PP_BOOL_10 1
#define PP_BOOL_11 1
#define PP_BOOL_12 1
#define PP_SEMI() ;
#define PP_COMMA() ,
#define PP_NOTHING()

#endif
