"""A hojichar filter that drops near duplicates with neardup's decisions.

``NearDedup`` is a :class:`hojichar.Filter` usable in :class:`hojichar.Compose` (it needs the
``hojichar`` package, ``pip install hojichar``). It checks each document's text against an online
:class:`neardup.Index`: a document that duplicates an earlier one is rejected, and every document
it decides gets the decision in ``document.extras["neardup"]`` (``keep``, ``reason``, ``dup_of``,
``similarity``). Unlike hojichar's ``GenerateDedupLSH`` + ``InlineDeduplicator``, which drops any
document sharing one LSH band key with an earlier one, a document is dropped only when its
similarity with the earlier one reaches the threshold (exact Jaccard by default), and the
decisions are those of ``neardup dedup`` over the same texts in the same order.

The state is the process's own (``store=None``), as ``InlineDeduplicator``'s, a saved index
file's (``store="PATH"``: opened when the filter is made, created when missing, and saved back
when the pipeline shuts down: ``with Compose([...]) as pipeline:``, or ``pipeline.shutdown()``,
hojichar's end-of-pipeline hook; :meth:`NearDedup.save` saves at any time), or a Redis server's
(``store="redis://HOST:PORT/DB"``, ``namespace=``) shared by every worker and machine that opens
the same namespace, as ``RedisDeduplicator``'s: a check and its insert are one atomic step on the
server, so two workers never both keep near copies.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from hojichar import Document, Filter

from . import Index, IndexDecision

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._settings import DeduperSettings

__all__ = ["NearDedup"]

# What `document.extras` holds the decision under.
EXTRAS_KEY = "neardup"


class NearDedup(Filter):
    """Rejects documents that near-duplicate an earlier document (hojichar ``Filter``).

    ``store`` and ``namespace`` choose the index (``None``: in this process's memory; the path
    of a saved index file: opened now and saved back by :meth:`shutdown`, which hojichar calls
    when a ``with Compose(...)`` block ends or ``Compose.shutdown()`` is called; a ``redis://``
    URL: a Redis server, shared by every filter that opens the namespace);
    ``id_key`` names the key of ``document.extras`` holding each document's id (a ``str`` or an
    ``int``), so that a document processed again (a retried batch) gets its first decision back
    instead of being compared with itself; without it documents get the index's integer ids.
    Other keyword arguments are neardup settings (``threshold``, ``num_perm``, ``verify``, …) or
    hojichar's ``Filter`` arguments (``p``, ``skip_rejected``, ``use_batch``, ``batch_size``,
    ``random_state``). With ``use_batch=True`` hojichar hands the filter whole batches, which
    neardup signs in parallel.
    """

    def __init__(
        self,
        store: Optional[str] = None,
        *,
        namespace: Optional[str] = None,
        id_key: Optional[str] = None,
        p: float = 1.0,
        skip_rejected: bool = True,
        use_batch: bool = False,
        batch_size: int = 128,
        random_state: Any = None,
        **settings: Unpack[DeduperSettings],
    ) -> None:
        super().__init__(
            p=p,
            skip_rejected=skip_rejected,
            use_batch=use_batch,
            batch_size=batch_size,
            random_state=random_state,
        )
        # Underscored: hojichar copies a filter's public plain attributes into every rejected
        # document's reject_reason.
        self._index = Index(store, namespace=namespace, **settings)
        # A file store is saved back at shutdown; memory has nowhere to go and Redis holds
        # every decision as it is made.
        self._saves_to_file = store is not None and not (
            isinstance(store, str) and store.startswith(("redis://", "rediss://", "unix://"))
        )
        self.id_key = id_key

    @property
    def index(self) -> Index:
        """The index documents are checked against."""
        return self._index

    def save(self, path: Optional[Union[str, os.PathLike]] = None) -> int:
        """Saves what the filter learned (:meth:`neardup.Index.save`): ``path=None`` writes a
        file store back to its file. Returns the bytes written."""
        return self._index.save(path)

    def shutdown(self) -> None:
        """hojichar's end-of-pipeline hook (``Compose.shutdown()``, the end of a ``with
        Compose(...)`` block): an index opened from a file is saved back to it, atomically."""
        if self._saves_to_file:
            self._index.save()
        super().shutdown()

    def _id(self, document: Document) -> Union[str, int, None]:
        if self.id_key is None:
            return None
        return document.extras.get(self.id_key)

    @staticmethod
    def _record(document: Document, decision: IndexDecision) -> None:
        document.extras[EXTRAS_KEY] = decision.to_dict()
        if not decision.keep:
            document.is_rejected = True

    def apply(self, document: Document) -> Document:
        """Checks the document's text; rejects it when it duplicates an earlier document."""
        self._record(document, self._index.check(document.text, id=self._id(document)))
        return document

    def apply_batch(self, batch: Sequence[Document]) -> list:
        """Checks a batch in one call (texts signed in parallel); documents already rejected are
        left alone when ``skip_rejected``, as one by one."""
        todo = [d for d in batch if not (self.skip_rejected and d.is_rejected)]
        decisions = self._index.check_many([d.text for d in todo], ids=[self._id(d) for d in todo])
        for document, decision in zip(todo, decisions):
            self._record(document, decision)
        return list(batch)
