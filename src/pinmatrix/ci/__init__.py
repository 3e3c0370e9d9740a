"""CI integration: GitHub Actions job matrices and Kubernetes smoke Jobs generated from the matrix."""
