/* Blocks of a kernel's loop on OpenMP threads. Built with -fopenmp (gcbench.compressors.kernels.native
 * tries it first), the library links libgomp.so.1, which in a process that imported torch from its
 * Linux wheels (they ship GNU OpenMP under that name) is torch's own runtime: the loop's threads are
 * the team torch's ops run on, so no thread of ours competes for a core with one of theirs still
 * spinning after an op. Without OpenMP the blocks run in order and
 * the caller spreads calls over its own threads. Included by the kernels that split their work. */
#ifndef GCBENCH_PARALLEL_H
#define GCBENCH_PARALLEL_H

#define GCBENCH_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
/* A `for` over blocks taken one at a time by `threads` threads (a thread kept off its core leaves its
 * blocks to the others), with the reduction clauses given. */
#define GCBENCH_BLOCKS(threads, clauses) GCBENCH_PRAGMA(omp parallel for schedule(dynamic, 1) num_threads(threads) clauses)
#else
#define GCBENCH_BLOCKS(threads, clauses)
#endif

/* 1 when built with OpenMP (one call runs the blocks on `threads` threads), else 0. */
int gcbench_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

#endif
