"""In-sandbox launcher (stdlib only; run as a script by the interpreter bound into bubblewrap).

Usage: python -I -S sandbox_launch.py PORT UNIX_SOCKET -- ARGV...

Inside the sandbox's own network namespace only loopback exists. This script listens on
127.0.0.1:PORT there and relays every connection to UNIX_SOCKET (the policy server's socket, bound into
the sandbox), then runs ARGV (the harness) and exits with its status. So the harness reaches the policy
server at http://127.0.0.1:PORT and nothing else: no other host, no other port.
Not imported by agentrl; agentrl.harness.opencode builds the bubblewrap command that runs it.
"""

import os
import socket
import subprocess
import sys
import threading


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
    _pipe(client, upstream)
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_relay, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: sandbox_launch.py PORT UNIX_SOCKET -- ARGV...", file=sys.stderr)
        return 2
    port, path, cmd = int(argv[0]), argv[1], argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    try:
        return subprocess.run(cmd, env=os.environ.copy()).returncode
    except FileNotFoundError as e:
        print(f"sandbox_launch: cannot run {cmd[0]}: {e}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
