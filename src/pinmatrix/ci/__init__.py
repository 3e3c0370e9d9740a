"""CI integration generated from the matrix: GitHub Actions job matrices, Kubernetes smoke Jobs and Slurm job
arrays over the GPU node pools of one file (``pools``), and what those jobs wrote read back."""
