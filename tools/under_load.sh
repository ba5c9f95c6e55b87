#!/usr/bin/env bash
# Run a command with two CPU-burning processes beside it (`make test-under-load`): a test that
# fails only under load has a race to find. The burners end with the command, however it ends.
set -uo pipefail
burners=()
stop() { kill "${burners[@]}" 2>/dev/null; wait "${burners[@]}" 2>/dev/null; }
trap stop EXIT
trap 'exit 130' INT TERM
for _ in 1 2; do
    python3 -c 'while True: pass' &
    burners+=("$!")
done
"$@"
