/* A shared library that is not NCCL: loading it as the real NCCL must be refused. */
__attribute__((visibility("default"))) int shunt_test_not_nccl(void) { return 1; }
