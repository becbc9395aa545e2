from importer.cli import main

raise SystemExit(main())
