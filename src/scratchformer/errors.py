"""Errors meant for people, not for stack traces."""


class UserError(Exception):
    """Something the user can fix: bad input, bad config, missing file.

    The message is one line that says what is wrong and how to fix it. The CLI prints it as
    ``error: <message>`` and exits with status 2 instead of showing a traceback.
    """
