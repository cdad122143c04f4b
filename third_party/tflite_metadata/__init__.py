"""TFLite's metadata schema as flatc generates it for Python, copied from MediaPipe's wheel (``LICENSE``: Apache 2.0).
``components.export.tflite_metadata`` packs its typed objects."""
