"""The results store (SQLite) and the files it imports and exports."""
