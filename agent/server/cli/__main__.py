import sys

from agent.server.cli.main import main

sys.exit(main())
