package console

// Assets are the console's embedded files.
var Assets = assets
