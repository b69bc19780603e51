"""One training iteration: of one chain (:mod:`.single`), of K chains stacked into one model
(:mod:`.stacked`), or of K chains each on its own CUDA stream (:mod:`.streamed`)."""
