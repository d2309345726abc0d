"""moto's S3-protocol server with every request handled one at a time.

moto checks an S3 precondition (If-Match, If-None-Match) and then writes,
without a lock between the two, so its threaded server lets two concurrent
conditional PUTs of one key both succeed, which S3 never does. Skald's
compare-and-swap writes rely on S3's atomicity, and the concurrency tests
check it; serving requests one at a time restores it (moto answers in
about a millisecond, so the tests barely slow down).

    python3 tests/s3_server.py PORT                 # serve until killed
    python3 tests/s3_server.py PORT --until-eof     # until stdin closes

The second form is how the tests start it (tests/src/moto.rs): the child
dies with the test process that holds its stdin.

moto 5.2 also answers CompleteMultipartUpload with the root element
`CompleteMultipartUploadResponse` where S3 sends
`CompleteMultipartUploadResult` (and the AWS SDKs expect it); the answer
is renamed on its way out. And moto ignores `If-Match` on
CompleteMultipartUpload and on DeleteObject, which S3 honours: the
precondition is checked here against the object's current ETag first (a
conditional delete of a missing object answers 404, as S3 does).
"""

import io
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server


MOTO_ROOT = b"CompleteMultipartUploadResponse"
S3_ROOT = b"CompleteMultipartUploadResult"


def current_etag(app, environ):
    """The ETag (unquoted) of the object a request names, or None."""
    # The request's own preconditions are not the HEAD's (moto honours
    # If-Match on a HEAD, and would answer 412 instead of the ETag).
    plain = {k: v for k, v in environ.items() if k not in ("HTTP_IF_MATCH", "HTTP_IF_NONE_MATCH")}
    head = dict(plain, REQUEST_METHOD="HEAD", QUERY_STRING="", CONTENT_LENGTH="0", **{"wsgi.input": io.BytesIO()})
    answer = {}

    def held(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, headers
        return lambda data: None

    b"".join(app(head, held))
    if not answer.get("status", "").startswith("200"):
        return None
    return next((v.strip('"') for k, v in answer["headers"] if k.lower() == "etag"), None)


def refuse(start_response, status, code):
    body = f"<Error><Code>{code}</Code><Message>If-Match</Message></Error>".encode()
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


def serialized(app):
    lock = threading.Lock()

    def handle(environ, start_response):
        completes = environ.get("REQUEST_METHOD") == "POST" and "uploadId=" in environ.get("QUERY_STRING", "")
        if environ.get("REQUEST_METHOD") == "DELETE" and environ.get("HTTP_IF_MATCH") is not None:
            with lock:
                current = current_etag(app, environ)
                if current is None:
                    return refuse(start_response, "404 Not Found", "NoSuchKey")
                if current != environ["HTTP_IF_MATCH"].strip('"'):
                    return refuse(start_response, "412 Precondition Failed", "PreconditionFailed")
                return list(app(environ, start_response))
        if not completes:
            with lock:
                # The whole response is produced under the lock.
                return list(app(environ, start_response))
        answer = {}

        def held(status, headers, exc_info=None):
            answer["status"], answer["headers"] = status, headers
            return lambda data: None

        with lock:
            want = environ.get("HTTP_IF_MATCH")
            if want is not None and current_etag(app, environ) != want.strip('"'):
                body = b"<Error><Code>PreconditionFailed</Code><Message>If-Match</Message></Error>"
                start_response("412 Precondition Failed", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
                return [body]
            body = b"".join(app(environ, held)).replace(MOTO_ROOT, S3_ROOT)
        headers = [(k, v) for k, v in answer["headers"] if k.lower() != "content-length"]
        start_response(answer["status"], headers + [("Content-Length", str(len(body)))])
        return [body]

    return handle


def main():
    port = int(sys.argv[1])
    server = make_server("127.0.0.1", port, serialized(DomainDispatcherApplication(create_backend_app)), threaded=True)
    if "--until-eof" in sys.argv[2:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        sys.stdin.read()
        server.shutdown()
    else:
        server.serve_forever()


if __name__ == "__main__":
    main()
