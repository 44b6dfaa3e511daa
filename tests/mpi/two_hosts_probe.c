/* Probe for tests/mpi/two_hosts.sh: proves the two ranks run in different
 * network namespaces and that a multi-MB Allreduce over TCP is correct.
 * Exit 0 on success, 1 on any failed check (from any rank). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define N (4 * 1024 * 1024) /* 4 Mi floats = 16 MiB */

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size, len, ok = 1;
  char name[MPI_MAX_PROCESSOR_NAME];
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_processor_name(name, &len);

  struct stat st;
  unsigned long long ino = 0;
  if (stat("/proc/self/ns/net", &st) == 0) ino = (unsigned long long)st.st_ino;
  else ok = 0;
  printf("rank %d/%d host %s netns %llu\n", rank, size, name, ino);
  fflush(stdout);

  /* Allreduce: rank r contributes (r+1) * (i % 7); expect S * (i % 7), S = n(n+1)/2.
   * All values are small integers, so the float sum is exact. */
  float *buf = malloc(sizeof(float) * N);
  if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int i = 0; i < N; i++) buf[i] = (float)((rank + 1) * (i % 7));
  MPI_Allreduce(MPI_IN_PLACE, buf, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  float s = (float)(size * (size + 1) / 2);
  for (int i = 0; i < N; i++)
    if (buf[i] != s * (float)(i % 7)) {
      fprintf(stderr, "rank %d: allreduce mismatch at %d: %g != %g\n", rank, i,
              buf[i], s * (float)(i % 7));
      ok = 0;
      break;
    }
  free(buf);

  /* Rank 0 gathers every rank's netns inode; all must be pairwise distinct. */
  unsigned long long *inos = rank == 0 ? malloc(sizeof(*inos) * size) : NULL;
  MPI_Gather(&ino, 1, MPI_UNSIGNED_LONG_LONG, inos, 1, MPI_UNSIGNED_LONG_LONG,
             0, MPI_COMM_WORLD);
  if (rank == 0) {
    if (size < 2) {
      fprintf(stderr, "rank 0: need at least 2 ranks, got %d\n", size);
      ok = 0;
    }
    for (int i = 0; i < size; i++)
      for (int j = i + 1; j < size; j++)
        if (inos[i] == inos[j]) {
          fprintf(stderr, "rank 0: ranks %d and %d share netns %llu\n", i, j,
                  inos[i]);
          ok = 0;
        }
    free(inos);
  }
  int all_ok;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s: %d ranks in distinct network namespaces, allreduce of %d floats\n",
           all_ok ? "PASS" : "FAIL", size, N);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
