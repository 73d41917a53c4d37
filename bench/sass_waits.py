"""Which instructions of a kernel wait on which scoreboard, from `cuobjdump -sass` text (sm_90).

    cuobjdump -sass OBJECT.o | python3 bench/sass_waits.py MANGLED_NAME_SUFFIX [--all]

A measuring tool for the decode producer (docs/design/decode-producer.md), not part of the
library. Each Hopper instruction's second 64-bit word carries its control bits: the scoreboard
it sets when its result lands (write, W0-W5), the one that guards its source registers until
read (read, R0-R5), and the scoreboards it waits on before issuing. A load issued ahead of its
use helps only if no instruction in between waits on the scoreboard it set: ptxas gives most
global loads of a warp one scoreboard, so one wait covers them all. Prints every load, shuffle,
TMA copy, mbarrier and barrier instruction of the kernel with its bits (--all: every
instruction that waits on anything).
"""

import re
import sys

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(.*?);\s*/\* (0x[0-9a-f]+) \*/")
CONTROL = re.compile(r"/\* (0x[0-9a-f]+) \*/")
KEYS = ("LDG", "LDS", "STS", "UTMALDG", "SYNCS", "SHFL", "BAR", "LDGSTS", "DEPBAR")


def control_bits(high: int) -> str:
    write, read, wait = (high >> 46) & 7, (high >> 49) & 7, (high >> 52) & 0x3F
    return "".join([f" W{write}" if write != 7 else "", f" R{read}" if read != 7 else "",
                    " wait" + "".join(str(b) for b in range(6) if wait >> b & 1) if wait else ""])


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    suffix, every = sys.argv[1], "--all" in sys.argv[2:]
    for function in re.split(r"\n\s+Function : ", sys.stdin.read())[1:]:
        name, *lines = function.split("\n")
        if not name.strip().endswith(suffix):
            continue
        print(f"== {name.strip()}")
        for i, line in enumerate(lines[:-1]):
            found, control = INSTRUCTION.search(line), CONTROL.search(lines[i + 1])
            if not found or not control:
                continue
            bits = control_bits(int(control.group(1), 16))
            text = found.group(2).strip()
            if any(key in text for key in KEYS) or (every and "wait" in bits):
                print(f"{found.group(1)}  {text[:64]:<64}{bits}")


if __name__ == "__main__":
    main()
