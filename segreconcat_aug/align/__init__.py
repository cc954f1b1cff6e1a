"""Word alignment: the alignment cache (:mod:`.cache`), loading Whisper (:mod:`.whisper`) and the
aligners with one API (:mod:`.aligners`: faster-whisper, openai-whisper, transformers,
pocketsphinx, importers).

May import the core and ``data``.
"""
