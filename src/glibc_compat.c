/* glibc compatibility shims, linked into the library and the test binary.
 *
 * The build container is Debian trixie (glibc 2.41). Its static libstdc++ and C++ code
 * compiled against its headers reference symbols that only newer glibc versions define
 * (ISO C23 strto* variants from 2.38, arc4random from 2.36). Defining them here, hidden,
 * binds those references inside our own objects, so the artifacts load on hosts with
 * glibc >= 2.35 (Ubuntu 22.04, Debian bookworm). verify.py enforces that limit.
 *
 * Compiled as C11 without _GNU_SOURCE so glibc's headers do not redirect the plain
 * functions called below back to their C23 names. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

#define FAS_COMPAT __attribute__((visibility("hidden")))

/* The C23 variants differ only in also accepting a "0b" prefix in base 0 or 2, which
 * nothing in this library or the C++ runtime's number parsing relies on. */
FAS_COMPAT long __isoc23_strtol(const char* s, char** end, int base) { return strtol(s, end, base); }
FAS_COMPAT unsigned long __isoc23_strtoul(const char* s, char** end, int base) { return strtoul(s, end, base); }
FAS_COMPAT long long __isoc23_strtoll(const char* s, char** end, int base) { return strtoll(s, end, base); }
FAS_COMPAT unsigned long long __isoc23_strtoull(const char* s, char** end, int base) {
    return strtoull(s, end, base);
}

/* std::random_device's default source. getrandom (glibc 2.25) draws from the same kernel
 * CSPRNG; it only fails for signals or a too-early boot, so retry. */
FAS_COMPAT uint32_t arc4random(void) {
    uint32_t value;
    for (;;) {
        ssize_t got = getrandom(&value, sizeof value, 0);
        if (got == (ssize_t)sizeof value) return value;
        if (got < 0 && errno != EINTR && errno != EAGAIN) abort();
    }
}
