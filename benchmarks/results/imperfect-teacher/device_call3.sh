#!/bin/bash
# The recipe re-run once more (call 2's script): a third sample of what the same command makes.
exec bash "$(dirname "$0")/device_call2.sh"
