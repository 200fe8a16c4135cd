/* The reference side of bench/host_vs_mpi.sh: MPI_Allreduce (float sum) or MPI_Allgather timed
 * over the sizes shunt-perf uses, with nccl-tests' meaning of a size (allreduce: the buffer;
 * allgather: the whole output, size / nranks from each rank). Prints "BYTES USEC" per size:
 * the mean over ITERS calls after WARMUP, the slowest rank's.
 * Usage: mpirun -np N mpi_coll allreduce|allgather MINBYTES MAXBYTES FACTOR ITERS WARMUP */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void coll(int gather, const float* in, float* out, int count) {
  if (gather)
    MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD);
  else
    MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 7 || (strcmp(argv[1], "allreduce") && strcmp(argv[1], "allgather"))) {
    if (!rank) fprintf(stderr, "usage: mpi_coll allreduce|allgather MINBYTES MAXBYTES FACTOR ITERS WARMUP\n");
    MPI_Finalize();
    return 2;
  }
  int gather = !strcmp(argv[1], "allgather");
  size_t lo = strtoull(argv[2], NULL, 0), hi = strtoull(argv[3], NULL, 0);
  unsigned f = (unsigned)atoi(argv[4]), iters = (unsigned)atoi(argv[5]), warm = (unsigned)atoi(argv[6]);
  if (f < 2) f = 2;
  if (lo < 4) lo = 4;
  if (iters < 1) iters = 1;
  float* in = malloc(hi);
  float* out = malloc(hi);
  if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 1);
  memset(out, 0, hi);
  for (size_t i = 0; i < hi / 4; i++) in[i] = (float)(i % 7 + (size_t)rank);
  for (size_t bytes = lo; bytes <= hi; bytes *= f) {
    int count = (int)(gather ? bytes / 4 / (size_t)n : bytes / 4);
    for (unsigned k = 0; k < warm; k++) coll(gather, in, out, count);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (unsigned k = 0; k < iters; k++) coll(gather, in, out, count);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, worst = 0;
    MPI_Reduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (!rank) printf("%zu %.2f\n", bytes, worst);
    fflush(stdout);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
