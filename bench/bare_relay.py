#!/usr/bin/env python3
"""A relay with none of the gateway's work, for `bench/gateway.py --floor`: what forwarding alone
costs on threads and on an event loop.

    python bench/bare_relay.py threads|aiohttp http://127.0.0.1:<upstream port>

Each reads the request, parses its JSON, forwards it on a kept-alive upstream connection and
relays the answer (a stream chunk by chunk, parsing a JSON answer): no token, validation, budget,
metering, record, span or metric. `threads`: `http.server` and `http.client` as the gateway uses
them; `aiohttp`: its server and pooled client (C parsers; aiohttp is in the lock through kopf).
Prints `a2rl-gateway listening on http://127.0.0.1:<port>` when ready.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

DROPPED = {"host", "content-length", "x-api-key", "connection"}


def serve_threads(upstream: str) -> None:
    parts = urlsplit(upstream)
    local = threading.local()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            json.loads(body)
            conn: http.client.HTTPConnection | None = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80)
                conn.connect()
                assert conn.sock is not None
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in DROPPED}
            conn.request("POST", self.path, body=body, headers=headers)
            resp = conn.getresponse()
            ctype = resp.headers.get("Content-Type") or ""
            self.send_response(resp.status)
            self.send_header("Content-Type", ctype)
            if "text/event-stream" in ctype:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while chunk := resp.read1(1 << 16):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            else:
                data = resp.read()
                json.loads(data)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

    server = Server(("127.0.0.1", 0), Handler)
    print(f"a2rl-gateway listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


async def serve_aiohttp(upstream: str) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64), auto_decompress=False)

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        json.loads(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in DROPPED}
        async with session.request(
            request.method, upstream + request.path_qs, data=body, headers=headers
        ) as up:
            ctype = up.headers.get("Content-Type", "")
            if "text/event-stream" in ctype:
                resp = web.StreamResponse(status=up.status, headers={"Content-Type": ctype})
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
            data = await up.read()
            json.loads(data)
            return web.Response(status=up.status, body=data, headers={"Content-Type": ctype})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"a2rl-gateway listening on http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    mode, url = sys.argv[1], sys.argv[2]
    if mode == "threads":
        serve_threads(url)
    else:
        asyncio.run(serve_aiohttp(url))
