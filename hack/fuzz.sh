#!/usr/bin/env bash
# Runs every Go fuzz target of the module (each `func FuzzX(f *testing.F)`
# in a _test.go file) for FUZZTIME each, one after the other. A crasher is
# written by `go test` into the package's testdata/fuzz/FuzzX/, where the
# seed-corpus run of `make test` replays it from then on: commit it with
# the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10m}

mapfile -t targets < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' internal api cmd 2>/dev/null |
	while read -r file; do
		for name in $(grep -oE '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
			echo "./$(dirname "$file") $name"
		done
	done | sort)
if [ "${#targets[@]}" -eq 0 ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${FUZZTIME} each"
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz: $name in $pkg"
	go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME"
done
