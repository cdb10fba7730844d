"""Opens many connections to a node at once, each sending the HTTP/2
client preface and an empty SETTINGS frame and then nothing, and holds
them: the flood of docs/security.md, "Memory under a flood".

    python3 tests/tools/connection_flood.py HOST PORT CONNECTIONS HOLD_SECONDS

It prints how many connections got their preface sent within 20 s (the
rest wait in the kernel's queue or for a SYN answer).
"""

import selectors
import socket
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    count, hold = int(sys.argv[3]), float(sys.argv[4])
    selector = selectors.DefaultSelector()
    sockets = []
    for _ in range(count):
        connection = socket.socket()
        connection.setblocking(False)
        connection.connect_ex((host, port))
        selector.register(connection, selectors.EVENT_WRITE)
        sockets.append(connection)
    sent = 0
    deadline = time.time() + 20
    while sent < count and time.time() < deadline:
        for key, _ in selector.select(timeout=1):
            try:
                key.fileobj.send(PREFACE)
                sent += 1
            except OSError:
                pass
            selector.unregister(key.fileobj)
    print(f"{sent} of {count} connections sent their preface", flush=True)
    time.sleep(hold)


if __name__ == "__main__":
    main()
