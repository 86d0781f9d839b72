"""The run store's engine: how runs and their chunks reach the database, and survive on the way.

- ``records``: a run's fields (``RunFields``) and images as they cross from the request path.
- ``images``: a new run's images, stored once per organization by content, named in its bodies.
- ``search_text``: the text a run is found by, its prompt's and its reply's.
- ``chunklog``: the crash log, every queued row on local disk until it is stored.
- ``spool``: the spool files that hold rows while the database is away.
- ``postgres``: a batch's rows in Postgres, COPYed in binary, outcomes UPDATEd.
"""
