"""Where the checkout is, for tests in any folder of tests/."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
