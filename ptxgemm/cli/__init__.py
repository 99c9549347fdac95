"""`python -m ptxgemm <command>`: one module per command, and the config options they share."""
