#!/usr/bin/env bash
# Inside the image (docker/Dockerfile): the node from `ros2 launch`, images from `ros2 bag play`, and
# the ROS 2 CLI as the judge. Exits 0 only if every check passed; prints what it saw.
#   1. parameters: the launch file leaves the config file's values alone; descriptors; run-time set
#   2. /visual_features arrives (ros2 topic echo --once) with the header of one of the bag's images
#   3. it keeps arriving (ros2 topic hz), and /diagnostics reports "encoder_node: pipeline"
set -euo pipefail
CHECK=/check
FEATURES=/visual_features
FEATURES_TYPE=openclaw_vision/msg/VisualFeatures
DIAGNOSTICS_TYPE=diagnostic_msgs/msg/DiagnosticArray
STATUS="encoder_node: pipeline"
LOG=$(mktemp -d)

# setup.bash scripts read unset variables: not under `set -u`
set +u
source /opt/ros/humble/setup.bash
source /ws/install/setup.bash
source /opt/openclaw_vision_venv/bin/activate
set -u

fail() {
  echo "INTEROP CHECK FAILED: $*"
  for f in "$LOG"/*.txt; do echo "--- $f"; tail -n 40 "$f"; done
  exit 1
}
ok() { echo "ok: $*"; }

ros2 launch openclaw_vision vision.launch.py config:=$CHECK/encoder.yaml > "$LOG/launch.txt" 2>&1 &
LAUNCH=$!
trap 'kill -INT $LAUNCH 2>/dev/null; wait $LAUNCH 2>/dev/null || true' EXIT

for _ in $(seq 60); do
  ros2 node list 2>/dev/null | grep -qx /encoder_node && break
  kill -0 $LAUNCH 2>/dev/null || fail "ros2 launch exited"
  sleep 1
done
ros2 node list | grep -qx /encoder_node || fail "/encoder_node did not appear within 60 s"
ok "/encoder_node is up"

# 1. parameters
ros2 param get /encoder_node model > "$LOG/param_model.txt"
grep -q "String value is: tiny" "$LOG/param_model.txt" || fail "model is not the config file's (tiny)"
ros2 param get /encoder_node precision | grep -q "String value is: fp32" || fail "precision is not the file's"
ros2 param describe /encoder_node model > "$LOG/describe_model.txt"
grep -q "Read only: true" "$LOG/describe_model.txt" || fail "model is not read-only"
ros2 param set /encoder_node model ViT-B-32 > "$LOG/set_model.txt" 2>&1 || true
grep -q "read-only" "$LOG/set_model.txt" || fail "setting a read-only parameter was not refused"
ros2 param set /encoder_node diagnostics_period 2 > "$LOG/set_period.txt"
grep -q "Set parameter successful" "$LOG/set_period.txt" || fail "diagnostics_period 2 (an int) was refused"
ros2 param set /encoder_node diagnostics_period 1.0 > /dev/null
ros2 param set /encoder_node depth 0 > "$LOG/set_depth.txt" 2>&1 || true
grep -q "failed" "$LOG/set_depth.txt" || fail "depth 0 was accepted"
ok "parameters: file values kept, read-only refused, run-time set taken, bad value refused"

# 2. and 3. listen first, then play
timeout 90 ros2 topic echo --once $FEATURES $FEATURES_TYPE > "$LOG/features.txt" 2>&1 &
ECHO=$!
timeout 90 ros2 topic echo --once /diagnostics $DIAGNOSTICS_TYPE > "$LOG/diagnostics.txt" 2>&1 &
DIAG=$!
timeout 30 ros2 topic hz $FEATURES > "$LOG/hz.txt" 2>&1 &
HZ=$!
sleep 3  # let the CLI's subscriptions be discovered before the first frame
ros2 bag info $CHECK/sample_bag > "$LOG/bag_info.txt" || fail "Humble cannot read the sample bag"
ros2 bag play $CHECK/sample_bag > "$LOG/play.txt" 2>&1 || fail "ros2 bag play failed"
wait $ECHO || fail "no $FEATURES message"
wait $DIAG || fail "no /diagnostics message"
wait $HZ || true

# the features' header is one of the bag's image headers (ros2 bag play leaves headers as recorded)
python3 - "$CHECK/sample_bag" "$LOG/features.txt" <<'PY' || fail "the features header is not an image header of the bag"
import sqlite3, sys, glob, yaml
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import Image
db = glob.glob(sys.argv[1] + "/*.db3")[0]
rows = sqlite3.connect(db).execute(
    "SELECT data FROM messages JOIN topics ON messages.topic_id = topics.id WHERE topics.name = '/camera/image_raw'")
headers = set()
for (data,) in rows:
    h = deserialize_message(bytes(data), Image).header
    headers.add((h.stamp.sec, h.stamp.nanosec, h.frame_id))
msg = yaml.safe_load(open(sys.argv[2]).read().split("---")[0])
h = msg["header"]
got = (h["stamp"]["sec"], h["stamp"]["nanosec"], h["frame_id"])
print(f"features header {got}; dim {msg['dim']}; model {msg['model_id']}; {len(headers)} image headers in the bag")
sys.exit(0 if got in headers and msg["dim"] == len(msg["embedding"]) > 0 else 1)
PY
ok "$FEATURES carries an image's header"

grep -q "average rate" "$LOG/hz.txt" || fail "ros2 topic hz saw no rate on $FEATURES"
ok "ros2 topic hz: $(grep 'average rate' "$LOG/hz.txt" | tail -n 1)"
grep -q "name: '$STATUS'" "$LOG/diagnostics.txt" || grep -q "name: $STATUS" "$LOG/diagnostics.txt" \
  || fail "/diagnostics has no '$STATUS' status"
grep -q "key: encoded" "$LOG/diagnostics.txt" || fail "/diagnostics has no 'encoded' counter"
ok "/diagnostics reports '$STATUS'"
echo "INTEROP CHECK PASSED"
