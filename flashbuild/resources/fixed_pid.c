/* getpid() for every nvcc the build runs (LD_PRELOAD; see fixed_pid.py): nvcc names its
   temporary files tmpxft_<pid>_..., and those names reach the objects it writes, so a fixed
   PID makes two compiles of one TU byte-identical. Each compile gets its own TMPDIR, so that
   concurrent compiles with this one PID never share a temporary file. */
#include <sys/types.h>

pid_t getpid(void) { return 4242; }
