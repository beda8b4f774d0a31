"""Slurm: pure argument builders (args), pure output parsers (parse), the client (client)."""
