"""``pinmatrix doctor``: what this GPU host can run of the project, and which known issues hit it (checkup.py)."""
