"""Bytes on the wire: every message (messages/), one msgpack codec with tensor and array
frames (codec.py), typed async ZeroMQ sockets (sockets.py), in-process channels with the same
interface (inproc.py) and CURVE authentication (security.py)."""
