#!/bin/sh
# Runs a Python test against the build: $1 the test, $2 the library, $3 python's source.
# Skips (77) where numpy (or, for the torch test, torch; for the property test,
# hypothesis) is not installed.
test="$1"; lib="$2"; src="$3"
py=/usr/bin/python3
$py -c "import numpy" 2>/dev/null || { echo "numpy is not installed: skipped"; exit 77; }
case "$test" in *torch*) $py -c "import torch" 2>/dev/null || { echo "torch is not installed: skipped"; exit 77; } ;; esac
case "$test" in *props*) $py -c "import hypothesis" 2>/dev/null || { echo "hypothesis is not installed: skipped"; exit 77; } ;; esac
COLL_LIBRARY="$lib" PYTHONPATH="$src:$(dirname "$test")" exec $py "$test"
