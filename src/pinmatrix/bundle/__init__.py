"""Bundles for hosts without network that take files of bounded size: a cell's wheels (``wheels``) or an image's
blobs (``image``), concatenated and cut into parts (``pack``), described by a manifest (``model``), signed (``sign``), unpacked on the
host by ``pinmatrix/shipped/unbundle.py`` (standard library only, copied into every bundle)."""
