"""A cell's image assembled as data, without running a container: the lock checked, the base and a layer per
wheel written, what the image needs checked (load check, AOT modules), the layers merged."""
