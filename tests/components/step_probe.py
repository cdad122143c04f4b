"""A step for ``test_step_server``: hands itself to run-local's step server, reports where it runs (one JSON line),
then does what its first argument says."""

import json
import os
import sys
import time

from components.step_server import LATER_IMPORTS, hand_off

hand_off()
print(
    json.dumps(
        {
            "pid": os.getpid(),
            "tensorflow": "tensorflow" in sys.modules,
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "marker": os.environ.get("PROBE_MARKER"),
            "loaded": [name for name in LATER_IMPORTS if name in sys.modules],
        }
    ),
    flush=True,
)
action = sys.argv[1]
if action == "exit":
    print("a line on stderr", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
elif action == "raise":
    raise ValueError("the probe failed")
elif action == "interrupt":
    raise KeyboardInterrupt
elif action == "thread":  # a thread that outlives the main one, and an exit function
    import atexit
    import threading

    atexit.register(lambda: print("exit function ran", flush=True))
    threading.Thread(target=lambda: (time.sleep(0.5), print("thread finished", flush=True))).start()
elif action == "sleep":
    time.sleep(600)
elif action == "jax":
    from components.keras_backend import activate_backend

    activate_backend("jax")
    import keras

    print(json.dumps({"backend": keras.backend.backend(), "pid": os.getpid()}), flush=True)
