"""triage.httpget: every GET triage makes of a server is bounded in time and size, never raises,
and says why it failed in one short line."""
from __future__ import annotations

import http.client
import http.server
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

from triage.httpget import BadUrl, Endpoint, Failure, get, post_json, why


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent() -> Iterator[str]:
    """Accepts connections and never answers: a server wedged after an OOM."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


class Answers(http.server.BaseHTTPRequestHandler):
    """/metrics: a line of exposition; /big: 2 MiB; /gone: 404; /slow: a chunk every 0.1 s for 3 s."""

    protocol_version = "HTTP/1.1"
    connections: list[int] = []

    def setup(self) -> None:
        super().setup()
        Answers.connections.append(self.client_address[1])

    def do_GET(self) -> None:
        if self.path == "/slow":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for _ in range(30):
                    self.wfile.write(b"a\r\n0123456789\r\n")
                    self.wfile.flush()
                    time.sleep(0.1)
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            return
        body = {"/metrics": b'vllm:num_requests_running{model_name="m"} 3.0\n', "/big": b"#" * (2 << 20)}.get(
            self.path, b"not here")
        self.send_response(404 if self.path == "/gone" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(size)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_an_answer_is_kept_with_its_status():
    with serving(Answers) as url:
        ok, gone = get(url + "/metrics", 5), get(url + "/gone", 5)
    assert (ok.status, ok.failure, ok.problem) == (200, None, None)
    assert ok.body.startswith(b"vllm:num_requests_running") and ok.took_s is not None
    assert (gone.status, gone.failure) == (404, None)


def test_a_post_sends_its_json():
    with serving(Answers) as url:
        reply = post_json(url + "/v1/completions", {"max_tokens": 1}, 5)
    assert reply.status == 200 and reply.body == b'{"max_tokens": 1}'


def test_a_refused_connection_is_one_line():
    reply = get(f"http://127.0.0.1:{closed_port()}/metrics", 5)
    assert (reply.status, reply.failure) == (None, Failure.ERROR)
    assert reply.problem == "connection refused (ConnectionError)" and reply.refused


def test_a_server_that_never_answers_costs_the_timeout():
    with silent() as url:
        started = time.monotonic()
        reply = get(url + "/metrics", 0.5)
        took = time.monotonic() - started
    assert took < 3, took
    assert (reply.status, reply.failure) == (None, Failure.TIMEOUT)
    assert reply.problem == "no answer within 0.5 s (a wedged server?)"


def test_a_body_over_the_cap_is_not_kept():
    with serving(Answers) as url:
        reply = get(url + "/big", 5, max_bytes=1 << 20)
    assert (reply.status, reply.body, reply.failure) == (200, b"", Failure.TOO_LARGE)
    assert reply.problem == "answer larger than 1 MiB: not kept"


def test_a_body_that_trickles_past_the_deadline_is_not_kept():
    with serving(Answers) as url:
        started = time.monotonic()
        reply = get(url + "/slow", 0.5)
        took = time.monotonic() - started
    assert took < 2, took
    assert (reply.status, reply.body, reply.failure) == (200, b"", Failure.TIMEOUT)
    assert reply.problem == "the answer took longer than 0.5 s: not kept"


# --- the kept-alive connection (watch) ---------------------------------------------------------------

def test_an_endpoint_reads_every_answer_on_one_connection():
    Answers.connections.clear()
    with serving(Answers) as url:
        endpoint = Endpoint(url)
        replies = [endpoint.get("/metrics", 5) for _ in range(3)] + [endpoint.get("/gone", 5)]
        endpoint.close()
    assert [r.status for r in replies] == [200, 200, 200, 404]
    assert len(Answers.connections) == 1


def test_an_endpoint_says_its_failures_like_get():
    refused = Endpoint(f"http://127.0.0.1:{closed_port()}").get("/metrics", 5)
    assert (refused.status, refused.failure, refused.problem) == (None, Failure.ERROR, "connection refused")
    with silent() as url:
        quiet = Endpoint(url).get("/metrics", 0.3)
    assert (quiet.failure, quiet.problem) == (Failure.TIMEOUT, "no answer within 0.3 s (a wedged server?)")
    with serving(Answers) as url:
        endpoint = Endpoint(url)
        big = endpoint.get("/big", 5, max_bytes=1 << 20)
        after = endpoint.get("/metrics", 5)           # the rest of the big answer was not left on the line
    assert (big.status, big.failure, big.problem) == (200, Failure.TOO_LARGE, "answer larger than 1 MiB: not kept")
    assert after.status == 200 and after.body.startswith(b"vllm:")


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://host/", "http:///metrics", "http://host:port/"])
def test_an_endpoint_refuses_what_is_not_an_http_url(url):
    with pytest.raises(BadUrl):
        Endpoint(url)


# --- the one-line summary ------------------------------------------------------------------------------

class ConnectionError(OSError):      # the shape of requests' exception: urllib3's story nested in its message
    pass


@pytest.mark.parametrize("exc, said", [
    (ConnectionRefusedError(111, "Connection refused"), "connection refused"),
    (socket.gaierror(-2, "Name or service not known"), "host not found (Name or service not known)"),
    (http.client.RemoteDisconnected("Remote end closed connection"),
     "the server closed the connection without an answer"),
    (OSError(113, "No route to host"), "no route to host"),
    (ConnectionError("HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: /metrics "
                     "(Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to "
                     "establish a new connection: [Errno 111] Connection refused'))"),
     "connection refused (ConnectionError)"),
    (ValueError("Invalid URL 'x': No scheme supplied.\nmore"), "ValueError: Invalid URL 'x': No scheme supplied."),
    (RuntimeError(), "RuntimeError"),
])
def test_why_says_a_failure_in_a_few_words(exc, said):
    assert why(exc) == said
