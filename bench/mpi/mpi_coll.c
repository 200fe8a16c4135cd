/* The reference side of bench/host_vs_mpi.sh: MPI_Allreduce (float sum), MPI_Allgather,
 * MPI_Reduce_scatter_block (float sum), MPI_Alltoall or MPI_Bcast (root 0) timed over the sizes
 * shunt-perf uses, with nccl-tests' meaning of a size: allreduce and broadcast the buffer;
 * allgather the whole output and reducescatter the whole input (size / nranks per rank's part);
 * alltoall each rank's whole send buffer (size / nranks to each peer). Prints "BYTES USEC" per
 * size: the mean over ITERS calls after WARMUP, the slowest rank's.
 * Usage: mpirun -np N mpi_coll COLL MINBYTES MAXBYTES FACTOR ITERS WARMUP */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum coll { ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, BROADCAST, NCOLL };
static const char* const names[NCOLL] = {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast"};

/* count: elements of the buffer a size names, or of one rank's part when the size is split. */
static void coll(enum coll c, const float* in, float* out, int count) {
  switch (c) {
    case ALLREDUCE:
      MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case ALLGATHER:
      MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case REDUCESCATTER:
      MPI_Reduce_scatter_block(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case ALLTOALL:
      MPI_Alltoall(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    default:
      MPI_Bcast(out, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  enum coll c = NCOLL;
  for (int k = 0; argc == 7 && k < NCOLL; k++)
    if (!strcmp(argv[1], names[k])) c = (enum coll)k;
  if (c == NCOLL) {
    if (!rank)
      fprintf(stderr,
              "usage: mpi_coll allreduce|allgather|reducescatter|alltoall|broadcast MINBYTES MAXBYTES FACTOR "
              "ITERS WARMUP\n");
    MPI_Finalize();
    return 2;
  }
  int split = c == ALLGATHER || c == REDUCESCATTER || c == ALLTOALL;
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
    int count = (int)(split ? bytes / 4 / (size_t)n : bytes / 4);
    for (unsigned k = 0; k < warm; k++) coll(c, in, out, count);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (unsigned k = 0; k < iters; k++) coll(c, in, out, count);
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
