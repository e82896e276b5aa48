#!/bin/bash
# The second sweep: 3 minutes of conversion, checkpoints judged at steps 50-450.
MINUTES=3 SAVE="50 100 150 220 320 450" KEEP="100 220 320 450" \
  exec bash "$(dirname "$0")/device_call1.sh"
