"""A module that takes 30 s to import: a forkserver preloading it is busy and does not answer a stop request
(tests/test_reliability.py::test_stopping_the_forkserver_is_bounded_even_while_it_is_busy)."""
import time

time.sleep(30)
