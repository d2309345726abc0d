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
"""

import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server


def serialized(app):
    lock = threading.Lock()

    def handle(environ, start_response):
        with lock:
            # The whole response is produced under the lock.
            return list(app(environ, start_response))

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
