def recv_stamped(fd: int, buffer: memoryview, /) -> tuple[int, int]:
    """One ``recvmsg`` of ``fd`` into ``buffer``: (bytes read, age in ns of its kernel stamp; -1 when none)."""
