#!/usr/bin/env bash
# The benchmark text: the Vim user manual and release notes (English prose with some code),
# as shipped by Debian's vim-runtime, cut to $1 bytes (default 3000000) at a line end.
# Usage: bench/tokenizer/make_text.sh [BYTES] > english.txt
set -eu  # no pipefail: head closing the pipe early is expected
bytes=${1:-3000000}
cat /usr/share/vim/vim90/doc/usr_*.txt /usr/share/vim/vim90/doc/version*.txt | iconv -f utf-8 -t utf-8 -c | head -c "$bytes" | sed '$d'
