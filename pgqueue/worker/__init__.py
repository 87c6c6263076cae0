"""Running a worker from Python (``pgq worker`` runs the same one).

* ``Queue.run_worker(**settings)``: a worker in this process until it is stopped
  (blocking; SIGTERM and SIGINT stop it gracefully).
* :class:`BackgroundWorker`: a worker in a thread of this process, started and stopped
  gracefully from the calling thread.
* :class:`Worker`: a worker in the running event loop (``await worker.run()``).
* :class:`WorkerSettings`: how a worker runs (concurrency, queues, lease, ...).

The other modules of this package are the worker's machinery: private.
"""

from pgqueue.worker.background import BackgroundWorker
from pgqueue.worker.settings import WorkerSettings
from pgqueue.worker.worker import Worker

__all__ = ["BackgroundWorker", "Worker", "WorkerSettings"]
