#!/usr/bin/env bash
# Run a command with two CPU-burning processes beside it (`make test-under-load`): a test that
# fails only under load has a race to find. The burners end with the command, however it ends:
# killed by the EXIT trap (the command's status kept; Ctrl-C, TERM and HUP end the script through
# it), and should this script itself be killed -9, each burner stops once it is orphaned.
set -uo pipefail
burners=()
stop() {
    [ "${#burners[@]}" -gt 0 ] || return 0
    kill "${burners[@]}" 2>/dev/null
    wait "${burners[@]}" 2>/dev/null
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
for _ in 1 2; do
    python3 -c 'import os
parent = os.getppid()
while os.getppid() == parent:
    pass' &
    burners+=("$!")
done
"$@"
