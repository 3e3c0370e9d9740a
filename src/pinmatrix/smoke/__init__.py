"""Running smokes: a run over cells (``session``, ``cellrun``), the runner that starts each smoke or batch of
smokes in a process of its own (``runner``, ``batch``) in a runtime (``runtimes``: the host, an engine's
container, the sandbox, the chroot), log classification and known-issue handling. The catalogue itself is read
by ``project/catalogue``; its files live in ``smoke/`` at the repository root."""
