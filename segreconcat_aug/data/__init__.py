"""Challenge data: Kaldi-style lists, audio reading and its check, the protocols (VPAC 2024,
VPC 2026) and where their folders are, VPC 2026's mixed trial lists, and the files of long
resumable jobs.

May import only the core (``errors``, ``seeding``): every other wing reads data through here.
"""
