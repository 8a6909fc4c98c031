"""costmodel: shared artifact contract and the ``costmodel`` command line."""
