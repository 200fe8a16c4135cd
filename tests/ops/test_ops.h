/* The parts of the ops test program; each returns its number of failed checks. */
#ifndef SHUNT_TEST_OPS_TEST_OPS_H
#define SHUNT_TEST_OPS_TEST_OPS_H

int test_conv(void);
int test_reduce(void);
int test_packet(void);

#endif
